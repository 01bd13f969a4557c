"""The closed loop: Omega_{t+1} = Evolve(Omega_t, C_t) between training steps.

After each step the trainer hands every rollout's turn labels, turn tags and reward to ``ClosedLoop.observe``:
``observe_posted`` drains them from the ``InterfaceBoard``, where the agent loop posts every finished training
episode (so groups that dynamic sampling drops before the advantage step count too);
``ClosedLoop.update`` aggregates the window into the failure profile C_t (``seal_envs.interface.FailureProfile``:
per label and tag, turns seen and the mean reward of their rollouts; infrastructure/task faults excluded), evolves
the interface with ``seal_envs.interface.evolve`` and publishes it on the ``InterfaceBoard``
(``seal_trainer.envpool``); every agent-loop worker adopts it for its training envs (``env.unwrapped.mutate``)
before its next episode. Validation rows use ``mode="eval"`` envs, which always run the original interface.

The window is the current epoch's rollouts (``profile_window=0``, as the reference's capability state, which
resets each epoch) or the last N steps. Training starts from ``InterfaceState.initial``: the reference's main
configuration turns the schema cues on from the first step.

Switches (see ``seal_trainer.config``): ``interface_evolution=False`` keeps the original interface throughout;
``closed_loop_update=False`` evolves once, from the first profile, and then keeps that interface.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from seal_envs.interface import EvolutionConfig, FailureProfile, InterfaceState, evolve

from seal_trainer.envpool import board_drain_rollouts, get_board


class ClosedLoop:
    def __init__(self, interface_evolution: bool = True, closed_loop_update: bool = True, profile_window: int = 0,
                 config: EvolutionConfig | None = None, board: Any = None):
        self.interface_evolution = interface_evolution
        self.closed_loop_update = closed_loop_update
        self.profile_window = profile_window
        config = config or EvolutionConfig()
        self.interface = InterfaceState.initial(config) if interface_evolution else InterfaceState(config=config)
        self.window: deque[FailureProfile] = deque(maxlen=profile_window if profile_window > 0 else None)
        self.epoch: int | None = None
        self.updates = 0
        self.board = board

    def observe(self, labels: Iterable[Sequence[str]], tags: Iterable[Sequence[str]], rewards: Iterable[float],
                valid: Iterable[bool] | None = None, epoch: int | None = None) -> FailureProfile:
        """Add one step's rollouts (every valid rollout's turns); returns that step's profile. With the epoch
        window, a new ``epoch`` first empties the window."""
        if self.profile_window <= 0 and epoch is not None and epoch != self.epoch:
            self.window.clear()
        self.epoch = epoch if epoch is not None else self.epoch
        rows = list(zip(labels, tags, rewards))
        keep = [True] * len(rows) if valid is None else list(valid)
        profile = FailureProfile.from_rollouts(row for row, ok in zip(rows, keep) if ok)
        self.window.append(profile)
        return profile

    def observe_posted(self, epoch: int | None = None) -> tuple[FailureProfile, int] | None:
        """Add every training episode the agent loop posted to the board since the last call (all rollouts of the
        step, including groups dynamic sampling dropped); returns (profile, rollouts), or None if none were
        posted (an agent loop that does not post: the trainer observes its batch instead)."""
        posted = board_drain_rollouts(self.board if self.board is not None else get_board())
        if not posted:
            return None
        profile = self.observe([r["labels"] for r in posted], [r["tags"] for r in posted],
                               [r["reward"] for r in posted], [not r["infrastructure_error"] for r in posted],
                               epoch=epoch)
        return profile, len(posted)

    def profile(self) -> FailureProfile:
        return sum(self.window, FailureProfile())

    @property
    def frozen(self) -> bool:
        return not self.interface_evolution or (not self.closed_loop_update and self.updates >= 1)

    def start(self) -> None:
        """Create the job's board (the agent loop posts every training episode to it, whatever the arm) and
        publish the starting interface, so that the first step's training envs already use it."""
        if self.board is None:
            self.board = get_board(create=True)
        if not self.interface.is_original:
            self.publish(0)

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
        return {"interface": self.interface.to_json(), "updates": self.updates, "epoch": self.epoch,
                "window": [p.to_json() for p in self.window]}

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        Path(path).write_text(json.dumps({**self.state(), **(extra or {})}, indent=2, sort_keys=True))

    def load(self, path: str | Path) -> dict[str, Any]:
        doc = json.loads(Path(path).read_text())
        self.interface = InterfaceState.from_json(doc["interface"])
        self.updates = int(doc.get("updates", 0))
        self.epoch = doc.get("epoch")
        self.window.clear()
        for p in doc.get("window", []):
            self.window.append(FailureProfile.from_json(p))
        if not self.interface.is_original or self.updates:
            self.publish()
        return doc


def interface_summary(state: InterfaceState) -> str:
    cues = [name for name, on in (("schema", state.schema_cues), ("errors", state.error_hints)) if on]
    cues += [f"guide:{g}" for g in state.guidelines]
    return f"v{state.version}[{', '.join(cues) or 'original'}]"


__all__ = ["ClosedLoop", "interface_summary"]
