"""Topologies: chip and pod specs from TOML files, networkx builders, routing and address maps."""
