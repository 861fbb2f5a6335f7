"""Evaluation: one forward of an unchanged model on one view and its derivatives.
`HaloEngine` (a view -> results where a `Placement` puts them), `SpecRunner` (how the
forward runs: interception, shortcuts, compile), the call rules both the interception and
`validate` read, the shells (`PerLayerRefresh`, `ThickShell`) and the one derivative recipe
(`derivatives`)."""
