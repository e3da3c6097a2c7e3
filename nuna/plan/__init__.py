"""Collective plans: the MSCCL XML IR, reader/writer, verification, replay DAG and generators."""
