"""What a StartIteration asks for, checked against the configured hierarchy."""

from __future__ import annotations

from collections.abc import Sequence

from server.iterator.scope import Scope, resolve_scope
from server.iterator.settings import DEFAULT_LEVELS, IteratorLevel
from server.runtime.errors import InvalidArgument
from server.runtime.validation import Violations

COMPOSITE = (
    IteratorLevel("album", "album", "id"),
    IteratorLevel("track", "track", id_columns=("album_id", "n"), parent_column="album_id"),
)


def _resolve(
    kind: str | None,
    *,
    first: Sequence[int] = (),
    last: Sequence[int] = (),
    level_name: str = "",
    emit: str = "file",
    levels: Sequence[IteratorLevel] = DEFAULT_LEVELS,
    field: str = "scope",
) -> tuple[Scope | None, dict[str, str]]:
    v = Violations()
    scope = resolve_scope(
        v, levels, kind=kind, level_name=level_name, first=first, last=last, field=field,
        emit_name=emit,
    )  # fmt: skip
    try:
        v.raise_if_any()
    except InvalidArgument as err:
        return scope, {f.field: f.description for f in err.violations}
    return scope, {}


class TestResolveScope:
    def test_an_enterprise_range_scopes_the_top_level(self) -> None:
        """enterprise_range names level 0 with an inclusive first..last."""
        scope, bad = _resolve("enterprise_range", first=[3], last=[9], field="enterprise_range")
        assert (scope, bad) == (Scope(0, (3,), (9,), 2), {})

    def test_a_single_id_is_its_own_last(self) -> None:
        """enterprise_id and user_id scope one key: last defaults to first."""
        assert _resolve("user_id", first=[42], field="user_id")[0] == Scope(1, (42,), (42,), 2)

    def test_a_level_scope_names_any_level(self) -> None:
        """level_scope picks the level by name, composite keys included."""
        scope, bad = _resolve(
            "level_scope", level_name="track", first=[1, 0], last=[1, 9], emit="track",
            levels=COMPOSITE, field="level_scope",
        )  # fmt: skip
        assert (scope, bad) == (Scope(1, (1, 0), (1, 9), 1), {})

    def test_no_scope_at_all_says_which_to_set(self) -> None:
        """A request with no scope set is refused on the scope field."""
        scope, bad = _resolve(None)
        assert scope is None
        assert "scope" in bad

    def test_a_key_of_the_wrong_width_or_order_is_refused(self) -> None:
        """The key has the level's width, and first is not after last."""
        assert (
            "enterprise_range"
            in _resolve("enterprise_range", first=[1, 2], last=[3], field="enterprise_range")[1]
        )
        assert _resolve("enterprise_range", first=[9], last=[3], field="enterprise_range")[1] == {
            "enterprise_range": "first must not be after last"
        }

    def test_the_emitted_level_exists_and_is_not_above_the_scope(self) -> None:
        """The emitted level must be named, be a level, and sit at or below the scope."""
        assert "level" in _resolve("user_id", first=[1], emit="")[1]
        assert "level" in _resolve("user_id", first=[1], emit="folder")[1]
        assert "level" in _resolve("user_id", first=[1], emit="enterprise")[1]

    def test_unknown_level_and_single_level_hierarchies_are_refused(self) -> None:
        """level_scope must name a level; user_id needs a second level."""
        assert (
            "level_scope.level"
            in _resolve("level_scope", level_name="folder", field="level_scope")[1]
        )
        single = (IteratorLevel("row", "t", "id"),)
        assert "user_id" in _resolve("user_id", first=[1], emit="row", levels=single)[1]
