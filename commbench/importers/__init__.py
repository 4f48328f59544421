"""Importers: results from other tools, stored as commbench run directories."""
