"""nuna: a simulator of non-uniform network access (NUNA) in multi-die GPU scale-up systems.

Layers depend one way: ``plan -> topology -> sim -> passes -> experiments -> cli``.
Library code raises :class:`nuna.errors.NunaError` subclasses and never prints or exits.
"""

__version__ = "0.16.0"
