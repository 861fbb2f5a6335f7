"""Model wrappers: the base mixin, the reference models, and single-process evaluation (the
oracle every distributed path is compared with)."""

from __future__ import annotations

from nvdd_plugins.models.aimnet2 import AIMNet2Wrapper, random_aimnet2
from nvdd_plugins.models.base import (
    BaseModelMixin,
    ModelConfig,
    ModelInputs,
    NeighborConfig,
    NeighborListFormat,
    host_checks_allowed,
    model_dtype,
    without_host_checks,
)
from nvdd_plugins.models.chgnet import CHGNetWrapper
from nvdd_plugins.models.composed import SumModel, spec_union
from nvdd_plugins.models.dftd3 import DFTD3Model
from nvdd_plugins.models.evaluate import ModelEvaluator, edge_vectors, evaluate_model
from nvdd_plugins.models.ewald import Ewald
from nvdd_plugins.models.heat_flux import (
    HEAT_FLUX_TENSORS,
    heat_flux_parts,
)
from nvdd_plugins.models.lennard_jones import SPEC_LJ_HALO, LennardJonesModel
from nvdd_plugins.models.loading import LOADERS, install_load_hint
from nvdd_plugins.models.mace import MACEWrapper
from nvdd_plugins.models.mace_builders import MACEArchitecture, random_mace
from nvdd_plugins.models.mpnn import SimpleMPNN
from nvdd_plugins.models.nequip import AllegroWrapper, NequIPWrapper
from nvdd_plugins.models.nequip_builders import random_allegro, random_nequip
from nvdd_plugins.models.pme import PME
from nvdd_plugins.models.radius_graph import RadiusGraphMPNN
from nvdd_plugins.models.requested import asked_for, asking_for
from nvdd_plugins.models.rigid_ion import BornMayerHuggins, RigidIonModel
from nvdd_plugins.models.sevennet import SevenNetWrapper, pretrained_sevennet_path, random_sevennet
from nvdd_plugins.models.uma import UMAWrapper
from nvdd_plugins.models.uma_builders import random_uma, save_uma_checkpoint, uma_config
from nvdd_plugins.models.virials import (
    atom_strain_shares,
    pair_gradients_of,
    per_atom_stresses,
)

# a plain torch.load of a saved model fails under weights-only loading: the note names the loader
install_load_hint()

__all__ = [
    "HEAT_FLUX_TENSORS",
    "LOADERS",
    "PME",
    "SPEC_LJ_HALO",
    "AIMNet2Wrapper",
    "AllegroWrapper",
    "BaseModelMixin",
    "BornMayerHuggins",
    "CHGNetWrapper",
    "DFTD3Model",
    "Ewald",
    "LennardJonesModel",
    "MACEArchitecture",
    "MACEWrapper",
    "ModelConfig",
    "ModelEvaluator",
    "ModelInputs",
    "NeighborConfig",
    "NeighborListFormat",
    "NequIPWrapper",
    "RadiusGraphMPNN",
    "RigidIonModel",
    "SevenNetWrapper",
    "SimpleMPNN",
    "SumModel",
    "UMAWrapper",
    "asked_for",
    "asking_for",
    "atom_strain_shares",
    "edge_vectors",
    "evaluate_model",
    "heat_flux_parts",
    "host_checks_allowed",
    "model_dtype",
    "pair_gradients_of",
    "per_atom_stresses",
    "pretrained_sevennet_path",
    "random_aimnet2",
    "random_allegro",
    "random_mace",
    "random_nequip",
    "random_sevennet",
    "random_uma",
    "save_uma_checkpoint",
    "spec_union",
    "uma_config",
    "without_host_checks",
]
