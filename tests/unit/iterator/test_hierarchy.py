"""The hierarchy's start-up check against the catalog, as pure logic over `SchemaFacts`:
names are compared the way the reads will send them, and a name that exists only in
another case is named in the error."""

from __future__ import annotations

import pytest

from server.iterator.hierarchy import HierarchyError, check_schema
from server.iterator.settings import IteratorLevel
from storage.ports import SchemaFacts

LEVELS = (
    IteratorLevel("artist", "Artist", "ArtistId"),
    IteratorLevel("album", "Album", "AlbumId", parent_column="ArtistId"),
)
TABLES = frozenset({"Artist", "Album", "Genre"})
COLUMNS = {
    "Artist": frozenset({"ArtistId", "Name"}),
    "Album": frozenset({"AlbumId", "Title", "ArtistId"}),
}
INDEXES = {"Artist": (("ArtistId",),), "Album": (("AlbumId",), ("ArtistId", "AlbumId"))}


def _facts(*, tables_fold: bool, columns_fold: bool) -> SchemaFacts:
    return SchemaFacts(
        tables=TABLES,
        columns=COLUMNS,
        indexes=INDEXES,
        tables_fold_case=tables_fold,
        columns_fold_case=columns_fold,
    )


POSTGRES = _facts(tables_fold=False, columns_fold=False)
MARIADB = _facts(tables_fold=False, columns_fold=True)
SQLITE = _facts(tables_fold=True, columns_fold=True)


def _with(level: int, **changes: str) -> tuple[IteratorLevel, ...]:
    levels = list(LEVELS)
    old = levels[level]
    levels[level] = IteratorLevel(
        changes.get("name", old.name),
        changes.get("table", old.table),
        changes.get("id_column", old.id_column),
        parent_column=changes.get("parent_column", old.parent_column),
    )
    return tuple(levels)


class TestCheckSchema:
    @pytest.mark.parametrize("facts", [POSTGRES, MARIADB, SQLITE], ids=["pg", "mariadb", "sqlite"])
    def test_exact_camel_case_names_pass_everywhere(self, facts: SchemaFacts) -> None:
        """Names spelled as the catalog spells them pass, with their indexes found."""
        assert check_schema(LEVELS, facts) == []

    def test_a_table_in_the_wrong_case_fails_where_tables_are_case_sensitive(self) -> None:
        """`table = "artist"` over a quoted "Artist" fails on PostgreSQL, naming the setting
        and the name that does exist."""
        with pytest.raises(HierarchyError) as err:
            check_schema(_with(0, table="artist"), POSTGRES)
        message = str(err.value)
        assert message.startswith("iterator.levels[0].table: table 'artist' does not exist")
        assert 'did you mean "Artist"?' in message

    def test_a_table_in_another_case_passes_where_the_database_folds_case(self) -> None:
        """SQLite finds "Artist" by any case, so the same setting is right there."""
        assert check_schema(_with(0, table="ARTIST"), SQLITE) == []

    def test_a_column_in_the_wrong_case_fails_where_columns_are_case_sensitive(self) -> None:
        """Columns are held to the same rule: PostgreSQL needs "ArtistId" exactly."""
        with pytest.raises(HierarchyError) as err:
            check_schema(_with(1, parent_column="artistid"), POSTGRES)
        assert str(err.value) == (
            "iterator.levels[1].parent_column: column 'artistid' does not exist in 'Album'; "
            'did you mean "ArtistId"? (this database compares column names case-sensitively)'
        )

    def test_a_column_in_another_case_passes_where_columns_fold_case(self) -> None:
        """MariaDB compares column names in any case (its tables it does not)."""
        assert check_schema(_with(1, parent_column="artistid", id_column="ALBUMID"), MARIADB) == []
        with pytest.raises(HierarchyError, match='did you mean "Album"'):
            check_schema(_with(1, table="album"), MARIADB)

    def test_a_name_missing_in_every_case_has_no_suggestion(self) -> None:
        """A plain typo names the setting, without a guess."""
        with pytest.raises(HierarchyError) as err:
            check_schema(_with(1, id_column="AlbumID2"), SQLITE)
        assert str(err.value) == (
            "iterator.levels[1].id_column: column 'AlbumID2' does not exist in 'Album'"
        )

    def test_every_problem_is_reported_at_once(self) -> None:
        """Two bad levels: one error naming both settings."""
        levels = (
            IteratorLevel("artist", "artist", "ArtistId"),
            IteratorLevel("album", "Album", "albumid", parent_column="ArtistId"),
        )
        with pytest.raises(HierarchyError) as err:
            check_schema(levels, POSTGRES)
        assert "iterator.levels[0].table" in str(err.value)
        assert "iterator.levels[1].id_column" in str(err.value)

    def test_the_index_check_matches_names_as_the_database_does(self) -> None:
        """An index on ("ArtistId", "AlbumId") serves a level configured in lower case where
        columns fold case; a level with no such index is warned about, by its setting."""
        assert check_schema(_with(1, parent_column="artistid", id_column="albumid"), SQLITE) == []
        no_index = SchemaFacts(
            tables=TABLES,
            columns=COLUMNS,
            indexes={"Artist": (("ArtistId",),)},
            tables_fold_case=False,
            columns_fold_case=False,
        )
        (warning,) = check_schema(LEVELS, no_index)
        assert warning.startswith("iterator.levels[1]: no index on Album(ArtistId, AlbumId)")
