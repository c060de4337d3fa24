"""Operating the daemons: metrics endpoint, log formats."""
