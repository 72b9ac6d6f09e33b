"""Why a case failed and where: causes proven by re-runs, where the drift starts, repro bundles."""
