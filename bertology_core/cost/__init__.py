"""The runtime cost model: a device's pass costs (:mod:`~bertology_core.cost.model`, torch-free), timed on the device
by :mod:`~bertology_core.cost.calibration` (which runs the stages' own code, so it sits above them), and each job of a
dry run priced from them by :mod:`~bertology_core.cost.estimate` (torch-free)."""
