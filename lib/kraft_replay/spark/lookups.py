"""Py4J's name lookups answered once per JVM view and class, not once per call.

Every PySpark ``functions`` call (``F.col``, ``F.lit``, ``F.when``, ...) and every list handed to the
JVM first looks up the Java class (``sc._jvm.functions``: a reflection round trip to the JVM) and then
its method (``.col``: another), before the one call that does the work; Py4J keeps neither answer.
Building a replay's plans makes about 37,000 round trips, 11,000 of them such lookups (docs/benchmarks.md,
"Test suite"). A class found in a JVM stays that class and a method stays that method, so
:func:`keep_lookups` keeps each answer on the object that was asked: a view keeps the classes and
packages it resolved, a class its static methods and nested classes. A static field is never kept
(its value may change), nor is a failed lookup (Py4J raises it again).

It assumes, as PySpark does, that a view's imports are set before its names are used: a short name
resolved once is not resolved again after a later ``java_import`` (PySpark's views import their
packages when the gateway starts).
"""

from __future__ import annotations

from typing import Any

__all__ = ["keep_lookups"]

_KEPT = "_kraft_replay_kept"


def _keeping(original):  # noqa: ANN001, ANN202 - a __getattr__
    from py4j.java_gateway import JavaClass, JavaMember, JavaPackage

    def lookup(self, name: str) -> Any:  # noqa: ANN001 - a JVMView or JavaClass
        found = original(self, name)
        # a class, package or method, never a field's value; not a private name (Py4J's own attributes)
        if isinstance(found, (JavaClass, JavaMember, JavaPackage)) and not name.startswith("_"):
            object.__setattr__(self, name, found)  # found by ordinary attribute access from now on
        return found

    setattr(lookup, _KEPT, original)
    return lookup


def keep_lookups() -> None:
    """Make Py4J keep the classes a JVM view resolves and the methods and nested classes a Java class
    resolves (see the module docstring). Idempotent; for the whole process."""
    from py4j.java_gateway import JavaClass, JVMView

    for cls in (JVMView, JavaClass):
        if not hasattr(cls.__getattr__, _KEPT):
            cls.__getattr__ = _keeping(cls.__getattr__)
