"""Suites: YAML files naming what to run and how strictly to gate it (`commbench run`)."""
