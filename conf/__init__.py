"""Hydra's configs, shipped as package data: ``cachegym.conf`` (Hydra finds an installed app's
configs as ``pkg://cachegym.conf``, which needs this file)."""
