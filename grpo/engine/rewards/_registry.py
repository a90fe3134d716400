"""The verifier registry: ``VERIFIERS`` maps a MindSpeed-RL ``verifier_function`` name to its scoring function
``(text, label) -> float``; ``@verifier("name", ...)`` registers one (verl's ``register_policy_loss`` habit).

A verifier needing an optional package is registered with ``@optional_verifier("name")`` as a loader returning
the function, or None when the package is missing; loaders run on the first look into the registry (a lookup,
``in``, iteration), not at import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

Verifier = Callable[[str, str], float]
_V = TypeVar("_V", bound=Verifier)


class VerifierRegistry(Mapping[str, Verifier]):
    def __init__(self) -> None:
        self._verifiers: dict[str, Verifier] = {}
        self._loaders: dict[str, Callable[[], Verifier | None]] = {}
        self.sympy_users: set[str] = set()  # verifiers that may ask the sympy child

    def register(self, name: str, fn: Verifier) -> None:
        if self._verifiers.get(name, fn) is not fn or name in self._loaders:
            raise ValueError(f"verifier {name!r} is registered already")
        self._verifiers[name] = fn

    def register_optional(self, name: str, load: Callable[[], Verifier | None]) -> None:
        if name in self._verifiers or name in self._loaders:
            raise ValueError(f"verifier {name!r} is registered already")
        self._loaders[name] = load

    def _loaded(self) -> dict[str, Verifier]:
        while self._loaders:
            name, load = self._loaders.popitem()
            fn = load()
            if fn is not None:
                self._verifiers[name] = fn
        return self._verifiers

    def __getitem__(self, name: str) -> Verifier:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    def __repr__(self) -> str:
        return f"VerifierRegistry({sorted(self._verifiers)} + optional {sorted(self._loaders)})"


VERIFIERS = VerifierRegistry()


def verifier(*names: str, sympy: bool = False) -> Callable[[_V], _V]:
    """Register the decorated function under each of ``names`` (MindSpeed-RL has aliases: acc_for_ppo);
    ``sympy``: it may ask the sympy child."""

    def register(fn: _V) -> _V:
        for name in names:
            VERIFIERS.register(name, fn)
            if sympy:
                VERIFIERS.sympy_users.add(name)
        return fn

    return register


def optional_verifier(name: str) -> Callable[[Callable[[], Verifier | None]], Callable[[], Verifier | None]]:
    """Register the decorated loader: it returns the verifier, or None when its package does not import."""

    def register(load: Callable[[], Verifier | None]) -> Callable[[], Verifier | None]:
        VERIFIERS.register_optional(name, load)
        return load

    return register
