"""A thought carried in a reasoning item's encrypted_content (server/protocol/carried_thought.py)."""

import pytest

from server.protocol.carried_thought import MARK, seal, unseal


def test_a_sealed_thought_reads_back_exactly_whatever_its_text():
    for thought in ("", "The user wants the weather in Lima.\n\n", "Zürich → 東京, \N{GRINNING FACE}" * 50):
        assert unseal(seal(thought)) == thought


def test_another_providers_encrypted_content_is_no_thought_this_server_can_read():
    assert unseal("gAAAAABpQ0t4c2VjcmV0") is None


@pytest.mark.parametrize("damage", [lambda s: s[:-6], lambda s: s[:-2] + ("A" if s[-2] != "A" else "B") + s[-1],
                                    lambda s: MARK + "%%%"])
def test_a_damaged_string_of_this_servers_is_refused_saying_so(damage):
    with pytest.raises(ValueError, match="encrypted_content"):
        unseal(damage(seal("The user wants the weather in Lima. Calling get_weather.")))


def test_a_string_that_inflates_past_any_thought_is_refused_before_it_is_all_inflated():
    import base64
    import tracemalloc
    import zlib

    raw = b"a" * (64 << 20)  # 64 MiB of text in about 64 KB: a decompression bomb's shape
    bomb = MARK + base64.urlsafe_b64encode(zlib.crc32(raw).to_bytes(4, "big") + zlib.compress(raw, 9)).decode()
    del raw
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="inflates past"):
            unseal(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, f"inflating took {peak} bytes"
