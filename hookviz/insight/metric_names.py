"""The faithfulness metrics by name, in their table order: a module of its own (no torch) so
that the command line's help names them without loading the library."""

METRICS = (
    "deletion",
    "insertion",
    "average_drop",
    "increase_in_confidence",
    "road_morf",
    "road_lerf",
)
