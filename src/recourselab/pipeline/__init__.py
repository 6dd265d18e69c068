"""Pipeline layer: commands and stage glue built on the library, reading a project's artifacts.

For example ``recourselab.pipeline.explain`` is the ``recourselab explain`` command:
counterfactuals for new rows in original units, from the artifacts of one dataset and seed.
"""
