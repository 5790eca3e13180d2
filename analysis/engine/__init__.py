"""The intervention engine: sites, batched staged forwards, the measurement of an edit's effect, and the metrics."""

from analysis.engine.staged import (MERGE_POSITIONS, SITES, Site, Stage, cache_run, first_difference, groups,
                                    kv_names, past_kv, run_from, run_stages, site, stop_layer, unit_start)

__all__ = ["MERGE_POSITIONS", "SITES", "Site", "Stage", "cache_run", "first_difference", "groups", "kv_names",
           "past_kv", "run_from", "run_stages", "site", "stop_layer", "unit_start"]
