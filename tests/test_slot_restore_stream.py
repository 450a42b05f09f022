"""A restore streams the slot file into the pool (slots.slot_io.restore_file), and a refused one leaves no trace.

In-process, on a tiny checkpoint: a request fills slot 0, the slot is saved, forgotten (its pin and every
cached page dropped) and restored from the file. The KV read back from the pages is the saved KV, the file
is never held whole in memory, and a file refused at any point -- its digest, its header, its contents --
gives every page it took back, and reports the format's first failing check.
"""

from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np
import pytest

import slots.fslot_reader as fslot_reader
from scheduler.engine import EngineRequest
from scheduler.sampling_params import SamplingParams
from server.runtime import build_runtime
from server.settings import ServeSettings
from slots import fslot
from slots.fslot import read_slot_file
from slots.fslot_layout import PREFIX_LEN, SlotFormatError
from slots.identity import IdentityMismatch, serving_identity
from slots.slot_io import RestoreError, restore_file, save_file, write_file
from slots.slot_table import SlotTable

PROMPT = [(13 * j) % 400 + 30 for j in range(1500)]


@pytest.fixture(scope="module", params=[None, 32], ids=["full", "windowed"])
def served(request, tiny_checkpoint, tmp_path_factory):
    window = request.param
    model = tiny_checkpoint("qwen3", sliding_window=window, layers=3) if window else tiny_checkpoint("qwen3")
    info, engine, _tok, runner, _ = build_runtime(ServeSettings(model=model, dtype="float32", max_model_len=2048))
    engine.start()
    table = SlotTable(2, engine.scheduler.alloc, info.max_model_len)
    engine.on_end.append(table.on_end)
    identity = serving_identity(info.spec, runner.kv_dtype_name, model)
    list(engine.submit(EngineRequest("fill", PROMPT, SamplingParams(max_tokens=1, temperature=0), slot_id=0)))
    path = tmp_path_factory.mktemp("saved") / "s.fslot"
    save_file(path, identity, runner, lambda fn: engine.call(fn).result(), table.slots[0])
    saved = read_slot_file(path).verify(identity)
    yield dataclasses.make_dataclass("Served", ["info", "engine", "runner", "table", "identity", "saved"])(
        info, engine, runner, table, identity, saved)
    engine.shutdown()


def _forget(s) -> None:
    s.engine.call(lambda e: [s.table.unpin(slot) for slot in s.table.slots] + [e.scheduler.alloc.cache.clear()]).result()


def _free_pages(s) -> dict[str, int]:
    return s.engine.call(lambda e: {name: group.num_free for name, group in e.scheduler.alloc.pool.groups.items()}).result()


def _restore(s, path, slot: int = 1):
    return restore_file(path, s.identity, s.runner, lambda fn: s.engine.call(fn).result(),
                        lambda tokens: s.table.pin(s.table.slots[slot], tokens) or len(tokens),
                        window=s.info.spec.sliding_window, max_bytes=1 << 30, vocab_size=s.info.spec.vocab_size,
                        n_ctx=s.info.max_model_len)


def test_a_restored_slot_holds_exactly_the_saved_kv_and_the_file_is_never_in_memory_whole(served, tmp_path,
                                                                                          monkeypatch):
    path = tmp_path / "s.fslot"
    size = write_file(path, served.identity, served.saved)
    _forget(served)
    monkeypatch.setattr(fslot_reader, "READ_CHUNK_BYTES", 32 << 10)
    tracemalloc.start()
    try:
        restored, n_read = _restore(served, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n_read == size and restored == len(served.saved.tokens)
    assert peak < size / 2, f"{peak} bytes allocated to restore a {size}-byte file"  # a whole read: >= size
    hold = served.table.slots[1].hold
    for layer, (saved, group) in enumerate(zip(served.saved.layers, served.runner.layer_groups)):
        table = hold.full_pages if group == "full" else hold.window_pages
        first = len(served.saved.tokens) - len(saved.k) if group == "window" else 0
        lo = next(i for i, page in enumerate(table) if page is not None) * served.info.page_size
        k, v = served.runner.read_layer(layer, table, lo, restored)
        assert np.array_equal(k, saved.k[lo - first:]) and np.array_equal(v, saved.v[lo - first:]), layer
    _forget(served)


def _rewritten(served, path, **change) -> None:
    path.write_bytes(fslot.encode(served.identity, dataclasses.replace(served.saved, **change)))


@pytest.mark.parametrize("fault", ["kv_byte_flipped", "nan_in_the_last_layer", "token_outside_the_vocabulary",
                                   "lying_header_and_bad_digest", "lying_header_restamped", "another_checkpoint"])
def test_a_refused_restore_gives_every_page_back_and_names_the_first_failing_check(served, tmp_path, fault):
    path = tmp_path / "bad.fslot"
    write_file(path, served.identity, served.saved)
    _forget(served)
    free = _free_pages(served)
    data = bytearray(path.read_bytes())
    if fault == "kv_byte_flipped":  # in the last layer's V: found only once every page was written
        data[-5] ^= 0x10
        path.write_bytes(bytes(data))
        expected = (SlotFormatError, "digest")
    elif fault == "nan_in_the_last_layer":
        layers = [fslot.LayerKV(layer.k, layer.v.copy(), layer.first_held) for layer in served.saved.layers]
        layers[-1].v[-1, 0, 0] = np.nan
        _rewritten(served, path, layers=layers)
        expected = (RestoreError, "layer 2 V holds NaN" if len(layers) == 3 else "V holds NaN")
    elif fault == "token_outside_the_vocabulary":
        tokens = served.saved.tokens.copy()
        tokens[7] = served.info.spec.vocab_size + 3
        _rewritten(served, path, tokens=tokens)
        expected = (RestoreError, "outside the vocabulary")
    elif fault in ("lying_header_and_bad_digest", "lying_header_restamped"):
        data[PREFIX_LEN + 8] ^= 0x01  # head_dim: the header no longer describes the body
        if fault == "lying_header_restamped":
            import hashlib
            data[24:PREFIX_LEN] = hashlib.sha256(bytes(data[PREFIX_LEN:])).digest()
        path.write_bytes(bytes(data))
        expected = (SlotFormatError, "digest" if fault == "lying_header_and_bad_digest" else "body_length")
    else:
        other = dataclasses.replace(served.identity, fingerprint="0" * 64)
        path.write_bytes(fslot.encode(other, served.saved))
        expected = (IdentityMismatch, "fingerprint")
    with pytest.raises(expected[0]) as caught:
        _restore(served, path)
    if expected[0] is SlotFormatError:
        assert caught.value.check == expected[1]
    else:
        assert expected[1] in str(caught.value) or getattr(caught.value, "field", None) == "checkpoint"
    assert _free_pages(served) == free, "a refused restore keeps no page"
    assert served.table.slots[1].hold is None and served.engine.call(
        lambda e: e.scheduler.alloc.cache.match(list(served.saved.tokens), 10**6).tokens).result() == 0


def _same_kv(a, b) -> bool:
    return all(np.array_equal(x.k, y.k) and np.array_equal(x.v, y.v) and x.first_held == y.first_held
               for x, y in zip(a.layers, b.layers, strict=True))


def test_a_slot_given_up_while_it_is_being_saved_is_still_saved_as_it_was(served, tmp_path, monkeypatch):
    import torch

    from slots import slot_io

    original = tmp_path / "a.fslot"
    write_file(original, served.identity, served.saved)
    _forget(served)
    _restore(served, original, slot=0)
    real_write = slot_io.write_file

    def scribbled_over_first(path, identity, payload):
        def take_every_free_page(engine):  # as requests needing the room would: the pin gives way
            alloc = engine.scheduler.alloc
            served.table.unpin(served.table.slots[0])
            alloc.cache.clear()
            for name, group in alloc.pool.groups.items():
                pages = alloc.allocate_pages(name, group.num_free)
                for layer, layer_group in enumerate(served.runner.layer_groups):
                    if layer_group == name and pages:
                        for half in served.runner.kv[layer]:
                            half[torch.tensor(pages)] = 7.0
                for page in pages:
                    group.decref(page)
        served.engine.call(take_every_free_page).result()
        return real_write(path, identity, payload)

    monkeypatch.setattr(slot_io, "write_file", scribbled_over_first)
    saved, _ = save_file(tmp_path / "b.fslot", served.identity, served.runner,
                         lambda fn: served.engine.call(fn).result(), served.table.slots[0])
    assert saved == len(served.saved.tokens)
    assert _same_kv(read_slot_file(tmp_path / "b.fslot").verify(served.identity), served.saved)
    _forget(served)  # the save's references were still on them when the cache was cleared: cached now, and no more
    assert sum(_free_pages(served).values()) == sum(served.runner.num_pages.values()), "the save let go of its pages"


def test_a_save_writes_what_the_pool_holds_on_the_slots_path(served, tmp_path):
    # The pin holds the last window; the windowed layers' earlier live pages on the path go in the file too
    # (a next turn that rejoins before the end reads them), and a restore installs them all.
    _forget(served)
    _restore(served, _saved_file(served, tmp_path), slot=0)
    n = len(served.saved.tokens)
    path = served.engine.call(lambda e: e.scheduler.alloc.cache.path_pages(list(served.saved.tokens),
                                                                          whole_window=True)).result()
    for layer, (saved, group) in enumerate(zip(served.saved.layers, served.runner.layer_groups)):
        table = path.full_pages if group == "full" else path.window_pages
        k, v = served.runner.read_layer(layer, table, saved.first_held, n)  # a gather, not the save's views
        assert np.array_equal(k, saved.k) and np.array_equal(v, saved.v), layer
    _forget(served)


def _saved_file(served, tmp_path):
    path = tmp_path / "saved.fslot"
    write_file(path, served.identity, served.saved)
    return path


def test_a_slot_action_on_a_stopped_engine_fails_at_once_and_leaves_the_file_as_it_was(served, tmp_path):
    from scheduler.engine import EngineStopped

    def stopped(fn):
        raise EngineStopped("the engine has stopped")

    path = _saved_file(served, tmp_path)
    before = path.read_bytes()
    with pytest.raises(EngineStopped):
        restore_file(path, served.identity, served.runner, stopped, lambda tokens: 0,
                     window=served.info.spec.sliding_window, max_bytes=1 << 30)
    with pytest.raises(EngineStopped):
        save_file(path, served.identity, served.runner, stopped, served.table.slots[0])
    assert path.read_bytes() == before
