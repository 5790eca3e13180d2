"""The main job on the embedded default (:mod:`.run`: ``fixedid-analyze demo``) and its report's sections (:mod:`.bitflip`, :mod:`.probes`, :mod:`.recoding`)."""

from analysis.demo.run import run_demo

__all__ = ["run_demo"]
