"""The Iterator's requests checked field by field, before anything reaches a store."""

from __future__ import annotations

import base64

import pytest
from loom.v1 import iterator_pb2 as pb

from server.iterator import convert
from server.iterator.settings import DEFAULT_LEVELS
from server.runtime.errors import InvalidArgument

JOB = "0123456789abcdef0123456789abcdef"


def _fields(call: object) -> set[str]:
    with pytest.raises(InvalidArgument) as caught:
        call()  # type: ignore[operator]
    return {v.field for v in caught.value.violations}


class TestJobIds:
    def test_a_job_id_is_32_lowercase_hex_characters(self) -> None:
        """Anything else is refused on job_id, whatever the call."""
        assert convert.job_id_from_proto(JOB) == JOB
        for bad in ("", JOB.upper(), JOB[:-1], JOB + "0", "../" + JOB[3:]):
            assert _fields(lambda bad=bad: convert.job_id_from_proto(bad)) == {"job_id"}


class TestStart:
    def test_a_valid_start_gives_the_scope_and_its_options(self) -> None:
        """The scope, rate, ack settings and the request echoed as JSON."""
        request = pb.StartIterationRequest(
            enterprise_id=7, level="file", rate_limit_per_second=500, require_ack=True
        )
        scope, rate, ack, timeout, text = convert.start_from_proto(request, DEFAULT_LEVELS)
        assert (scope.level, scope.first, scope.last, scope.emit_level) == (0, (7,), (7,), 2)
        assert (rate, ack, timeout) == (500, True, 0)
        assert '"enterpriseId": "7"' in text

    def test_every_bad_field_is_named_at_once(self) -> None:
        """Scope, rate and ack timeout problems come back together."""
        request = pb.StartIterationRequest(
            level="file", rate_limit_per_second=-1, ack_timeout_s=86_401
        )
        fields = _fields(lambda: convert.start_from_proto(request, DEFAULT_LEVELS))
        assert fields == {"scope", "rate_limit_per_second", "ack_timeout_s"}


class TestAcksAndStreams:
    def test_an_ack_names_chunks_or_objects_within_bounds(self) -> None:
        """At least one id; chunk ids of 1..512 characters."""
        ok = pb.AckObjectsRequest(job_id=JOB, chunk_ids=["t/1"], object_ids=[4])
        assert convert.ack_from_proto(ok) == (JOB, ["t/1"], [4])
        assert _fields(lambda: convert.ack_from_proto(pb.AckObjectsRequest(job_id=JOB))) == {
            "chunk_ids"
        }
        long_id = pb.AckObjectsRequest(job_id=JOB, chunk_ids=["x" * 513])
        assert _fields(lambda: convert.ack_from_proto(long_id)) == {"chunk_ids"}

    def test_a_stream_batch_of_zero_is_the_servers_default(self) -> None:
        """max_batch_size 0 means the default; above the bound it is refused."""
        assert convert.stream_from_proto(pb.StreamObjectsRequest(job_id=JOB), 5000) == (JOB, 5000)
        big = pb.StreamObjectsRequest(job_id=JOB, max_batch_size=100_001)
        assert _fields(lambda: convert.stream_from_proto(big, 5000)) == {"max_batch_size"}


class TestListing:
    def test_a_page_token_is_one_this_service_issued(self) -> None:
        """A token decodes to (created, job id); a forged one is refused on page_token."""
        token = base64.urlsafe_b64encode(f"123:{JOB}".encode()).decode()
        assert convert.list_from_proto(pb.ListJobsRequest(page_token=token)) == (
            convert.DEFAULT_PAGE,
            (123, JOB),
        )
        for forged in ("%%%", base64.urlsafe_b64encode(b"x:y").decode()):
            request = pb.ListJobsRequest(page_token=forged)
            assert _fields(lambda r=request: convert.list_from_proto(r)) == {"page_token"}
