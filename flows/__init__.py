"""Prefect flows of the pipeline: one flow per multi-seed stage (see recourselab.orchestration)."""
