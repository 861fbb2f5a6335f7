"""Command line: `python -m nvdd_plugins.validate my_module:MyWrapper` validates a wrapper
(a class or factory called without arguments, or an instance), prints the report and exits
with status 0 when it is ok, 1 when not."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from nvdd_plugins.config import StrategyKind
from nvdd_plugins.models import BaseModelMixin
from nvdd_plugins.validate.trace import trace_and_validate

__all__ = ["load_wrapper", "main"]

EXAMPLES = """examples:
  python -m nvdd_plugins.validate nvdd_plugins.models:SimpleMPNN
  python -m nvdd_plugins.validate my_model:MyWrapper --world-size 4 --save my_wrapper.spec.json
    (my_model.py in the working directory or on PYTHONPATH; MyWrapper() builds the wrapper)"""


def load_wrapper(target: str) -> Any:
    """The model wrapper named by "module:attribute" (called when callable)."""
    module_name, sep, path = target.partition(":")
    if not sep or not path:
        raise SystemExit(f"expected module:Wrapper, got {target!r}")
    found: Any = importlib.import_module(module_name)
    for part in path.split("."):
        found = getattr(found, part)
    return found if isinstance(found, BaseModelMixin) else found()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m nvdd_plugins.validate",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("wrapper", help="module:Wrapper (class, factory or instance)")
    parser.add_argument("--world-size", type=int, default=2, help="simulated ranks")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:k]")
    parser.add_argument("--strategy", default=StrategyKind.HALO.value, help="halo (default)")
    parser.add_argument("--save", metavar="PATH", help="write the verified spec as JSON")
    args = parser.parse_args(argv)
    report = trace_and_validate(
        load_wrapper(args.wrapper),
        world_size=args.world_size,
        strategy=args.strategy,
        device=args.device,
    )
    print(report)
    if args.save and report.spec is not None:
        report.spec.save(args.save)
        print(f"spec written to {args.save}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
