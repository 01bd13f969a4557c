"""Thin adapters over bfcl-eval's backend classes, for the two things our sandbox protocol cannot express.

1. Long context. BFCL loads a long-context scenario with ``_load_scenario(config, long_context=True)``; our
   tool server calls ``_load_scenario(state)`` with the state alone. The adapters read the flag from a reserved
   key of the state (``LONG_CONTEXT_KEY``, added by our task loader) and pass it on. Only the four classes whose
   behaviour depends on the flag are adapted; the others ignore it in BFCL too.
2. File-system snapshots. BFCL's ``Directory`` keeps a public ``parent`` link, so the public-attribute snapshot
   of a file system is a cycle (one long-context tree serialised to over 1 GB). BFCL's own equality
   (``Directory.__eq__``: name and contents; ``File.__eq__``: name and content) ignores the link, so our
   directories keep it private: the snapshot becomes the tree that BFCL's checker compares, nothing more.
3. A shared default. ``TwitterAPI.post_tweet(tags=[], mentions=[])`` stores its default lists in the tweet, so
   ``mention`` appends to a list shared by every tweet posted without mentions, in every episode of the process
   (a long-lived sandbox runs thousands). The adapter passes fresh lists where an argument was left out;
   everything else (an explicit ``null`` included) is BFCL's.

Every other tool method is BFCL's, unchanged (mpmath results, for one, reach the policy and the verifier as
BFCL words them: see ``seal_envs.sandbox.server.result_text``).
"""

from __future__ import annotations

from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import (
    gorilla_file_system,
    posting_api,
    trading_bot,
    travel_booking,
    vehicle_control,
)

LONG_CONTEXT_KEY = "seal_long_context"


class _LongContextFlag:
    """Mixin: take ``long_context`` from the scenario's reserved key (BFCL's own loaders ignore unknown keys)."""

    def _load_scenario(self, scenario: dict[str, Any], long_context: bool = False) -> None:
        scenario = dict(scenario)
        long_context = bool(scenario.pop(LONG_CONTEXT_KEY, False)) or long_context
        super()._load_scenario(scenario, long_context=long_context)  # type: ignore[misc]


class Directory(gorilla_file_system.Directory):
    """BFCL's directory with a private parent link (``parent`` still reads and writes it)."""

    @property
    def parent(self) -> Directory | None:
        return self._parent

    @parent.setter
    def parent(self, value: Directory | None) -> None:
        self._parent = value

    def _add_directory(self, dir_name: str) -> None:
        super()._add_directory(dir_name)  # BFCL's checks; then swap in our class (the new directory is empty)
        self.contents[dir_name] = Directory(dir_name, self)

    @classmethod
    def adopt(cls, tree: gorilla_file_system.Directory, parent: Directory | None = None) -> Directory:
        """Rebuild a BFCL directory tree with our directories (files are kept as they are)."""
        new = cls(tree.name, parent)
        new.contents = {name: cls.adopt(item, new) if isinstance(item, gorilla_file_system.Directory) else item
                        for name, item in tree.contents.items()}
        return new


class GorillaFileSystem(_LongContextFlag, gorilla_file_system.GorillaFileSystem):
    def _load_scenario(self, scenario: dict[str, Any], long_context: bool = False) -> None:
        super()._load_scenario(scenario, long_context=long_context)
        self.root = Directory.adopt(self.root)
        self._current_dir = self.root


class TradingBot(_LongContextFlag, trading_bot.TradingBot):
    pass


class TravelAPI(_LongContextFlag, travel_booking.TravelAPI):
    pass


class VehicleControlAPI(_LongContextFlag, vehicle_control.VehicleControlAPI):
    pass


_LEFT_OUT: Any = object()


class TwitterAPI(posting_api.TwitterAPI):
    def post_tweet(self, content: str, tags: list[str] = _LEFT_OUT, mentions: list[str] = _LEFT_OUT) -> dict:
        return super().post_tweet(content, tags=[] if tags is _LEFT_OUT else tags,
                                  mentions=[] if mentions is _LEFT_OUT else mentions)

    post_tweet.__doc__ = posting_api.TwitterAPI.post_tweet.__doc__


ADAPTED = {cls.__name__: cls for cls in (GorillaFileSystem, TradingBot, TravelAPI, TwitterAPI, VehicleControlAPI)}
"""BFCL class name -> our adapter, for the classes that need one."""
