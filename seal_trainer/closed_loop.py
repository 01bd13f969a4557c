"""The closed loop: Omega_{t+1} = Evolve(Omega_t, C_t) between training steps.

After each step the trainer hands the batch's turn labels to ``ClosedLoop.observe``; ``ClosedLoop.update``
aggregates the last ``profile_window`` steps into the failure profile C_t (label counts of agent-attributable
turns; infrastructure/task faults excluded), evolves the interface with ``seal_envs.interface.evolve`` and
publishes it on the ``InterfaceBoard`` (``seal_trainer.envpool``); every agent-loop worker adopts it for its
training envs (``env.unwrapped.mutate(state)``) before its next episode. Validation rows use ``mode="eval"``
envs, which always run the original interface.

Switches (see ``seal_trainer.config``): ``interface_evolution=False`` never evolves (the interface stays the
original); ``closed_loop_update=False`` evolves once, from the first profile, and then keeps that interface.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from seal_envs.interface import InterfaceState, evolve, failure_profile

from seal_trainer.envpool import get_board


class ClosedLoop:
    def __init__(self, interface_evolution: bool = True, closed_loop_update: bool = True, profile_window: int = 1,
                 interface: InterfaceState | None = None, board: Any = None):
        self.interface_evolution = interface_evolution
        self.closed_loop_update = closed_loop_update
        self.interface = interface or InterfaceState()
        self.window: deque[Counter[str]] = deque(maxlen=max(1, profile_window))
        self.updates = 0
        self.board = board

    def observe(self, trajectory_labels: Iterable[Sequence[str]], valid: Iterable[bool] | None = None) -> dict[str, int]:
        """Add one step's labels; returns that step's failure profile."""
        counts: Counter[str] = Counter()
        labels_list = list(trajectory_labels)
        valid_list = [True] * len(labels_list) if valid is None else list(valid)
        for labels, ok in zip(labels_list, valid_list):
            if ok:
                counts.update(labels)
        profile = failure_profile(dict(counts))
        self.window.append(Counter(profile))
        return profile

    def profile(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for c in self.window:
            total.update(c)
        return dict(sorted(total.items()))

    @property
    def frozen(self) -> bool:
        return not self.interface_evolution or (not self.closed_loop_update and self.updates >= 1)

    def update(self, step: int | None = None) -> tuple[InterfaceState, bool]:
        """Evolve from the current profile (unless switched off) and publish; returns (state, changed)."""
        if self.frozen or not self.window:
            return self.interface, False
        new = evolve(self.interface, self.profile())
        self.updates += 1
        changed = (new.schema_cues, new.error_hints, new.guidelines) != (
            self.interface.schema_cues, self.interface.error_hints, self.interface.guidelines)
        self.interface = new
        self.publish(step)
        return new, changed

    def publish(self, step: int | None = None) -> None:
        board = self.board if self.board is not None else get_board(create=True)
        if board is None:
            return
        if hasattr(board, "publish") and not hasattr(board.publish, "remote"):
            board.publish(self.interface.dumps(), step)
        else:
            import ray

            ray.get(board.publish.remote(self.interface.dumps(), step))

    def state(self) -> dict[str, Any]:
        return {"interface": self.interface.to_json(), "updates": self.updates,
                "window": [dict(c) for c in self.window]}

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        Path(path).write_text(json.dumps({**self.state(), **(extra or {})}, indent=2, sort_keys=True))

    def load(self, path: str | Path) -> dict[str, Any]:
        doc = json.loads(Path(path).read_text())
        self.interface = InterfaceState.from_json(doc["interface"])
        self.updates = int(doc.get("updates", 0))
        self.window.clear()
        for c in doc.get("window", []):
            self.window.append(Counter(c))
        if not self.interface.is_original or self.updates:
            self.publish()
        return doc


def interface_summary(state: InterfaceState) -> str:
    cues = [name for name, on in (("schema", state.schema_cues), ("errors", state.error_hints)) if on]
    cues += [f"guide:{g}" for g in state.guidelines]
    return f"v{state.version}[{', '.join(cues) or 'original'}]"


__all__ = ["ClosedLoop", "interface_summary"]
