"""Studies on a distributed engine (Ray: ``draligned run STUDY --ray ADDRESS``), imported only when asked for."""
