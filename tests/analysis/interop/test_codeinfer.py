"""infer_code on input tables: every rendering option the toolkit has comes back as the config that rendered it (the
expected rows are the model's own ``input_code``, the expected fields the config's), foreign recodings are recovered
over GF(2), and tables that are not (or not exactly) a code are refused with their reason."""

import itertools
import json

import numpy as np
import pytest
import torch

from analysis import AnalysisError
from analysis.interop.codeinfer import infer_code
from fixedid import FixedIdLM, ModelConfig
from fixedid.codes import GF2Code, code_table, random_invertible

CODE_FIELDS = ("interface", "n_bits", "bit_order", "value_map", "code_scale", "repeat")


def shape(vocab=333, d=32, **kw):
    return ModelConfig.preset("toy", vocab_size=vocab, d_model=d, n_layers=1, n_heads=2, d_ff=32, context=8,
                              **{"interface": "learned", **kw})


def rows_of(cfg):
    """The [vocab, d_model] rows the model reads, as fixedid renders them."""
    return FixedIdLM(cfg, init=False).input_code(torch.arange(cfg.vocab_size)).detach()


GRID = list(itertools.product(["msb", "lsb"], ["pm1", "01"], ["tile", "interleave"],
                              ["canonical", "gf2", "gf2-affine", "permuted"]))


@pytest.mark.parametrize("i", range(len(GRID)), ids=["-".join(g) for g in GRID])
def test_every_rendering_comes_back_as_its_config(i):
    bit_order, value_map, repeat, interface = GRID[i]
    scale = (1.0, 0.3, 2.5)[i % 3]
    dtype = (torch.float32, torch.bfloat16, torch.float16)[(i // 3) % 3]
    vocab, n = ((333, 16), (200, 8))[i % 2]
    code = dict(interface=interface.removesuffix("-affine"), gf2_affine=interface.endswith("affine"), gf2_seed=i,
                table_seed=i, n_bits=n, bit_order=bit_order, value_map=value_map, code_scale=scale, repeat=repeat)
    cfg = shape(vocab, **code).resolved()
    rows = rows_of(cfg).to(dtype)
    found = infer_code(rows)
    assert found.kind == cfg.interface and found.interface == cfg.interface, found.reason
    back = found.apply(shape(vocab)).resolved()
    fields = CODE_FIELDS + {"gf2": ("gf2_matrix", "gf2_offset", "gf2_seed", "gf2_affine"),
                            "permuted": ("table_seed",)}.get(cfg.interface, ())
    assert {f: getattr(back, f) for f in fields} == {f: getattr(cfg, f) for f in fields}
    assert torch.equal(rows_of(back).to(dtype), rows)  # bit for bit in the dtype the rows were stored in
    assert found.max_deviation <= found.rtol == max(torch.finfo(dtype).eps, torch.finfo(torch.float32).eps)
    assert found.determined_bits == (vocab - 1).bit_length()
    json.dumps(found.to_dict())


def test_a_foreign_recoding_is_recovered_exactly_where_the_rows_fix_it():
    a = random_invertible(16, 10 ** 6)  # not one of the toolkit's seeded draws below MAX_SEED
    code = GF2Code(a, np.random.default_rng(1).integers(0, 2, 16, dtype=np.uint8))
    table = code_table(40_000, 16, recoding=code)  # 40,000 > 2**15: ids 1, 2, 4, ..., 32768 all occur
    found = infer_code(np.tile(table, (1, 2)))
    assert found.kind == "gf2" and found.recoding == code and found.gf2_seed is None is found.gf2_affine
    assert found.determined_bits == 16 and found.config_fields()["gf2_matrix"] == a.astype(int).tolist()
    assert "gf2_seed" not in found.config_fields() and "gf2_affine" not in found.config_fields()
    small = infer_code(np.tile(table[:333], (1, 2)))  # ids below 512: A's first 9 columns and b are fixed
    assert small.kind == "gf2" and small.determined_bits == 9
    assert np.array_equal(small.recoding.matrix[:, :9], a[:, :9]) and small.recoding.offset.tolist() == code.offset.tolist()
    assert np.array_equal(code_table(333, 16, recoding=small.recoding), table[:333])


def test_an_lsb_recoding_without_a_seed_comes_back_as_the_msb_one_that_renders_it():
    code = GF2Code(random_invertible(8, 10 ** 6), np.zeros(8, dtype=np.uint8))
    table = code_table(256, 8, recoding=code, bit_order="lsb")
    found = infer_code(table)
    assert found.kind == "gf2" and found.bit_order == "msb" and found.gf2_seed is None
    assert np.array_equal(code_table(256, 8, recoding=found.recoding, bit_order="msb"), table)
    assert np.array_equal(found.recoding.matrix, code.matrix[::-1])  # the reversal R applied to A's rows


def test_the_smallest_width_that_renders_the_rows_is_chosen():
    assert infer_code(rows_of(shape(256, 64, interface="canonical", n_bits=8))).n_bits == 8
    assert infer_code(rows_of(shape(256, 64, interface="canonical", n_bits=16))).n_bits == 16
    assert infer_code(rows_of(shape(256, 64, interface="canonical", n_bits=16)), n_bits=16).n_bits == 16
    with pytest.raises(AnalysisError, match="cannot describe"):
        infer_code(rows_of(shape(256, 64, interface="canonical")), n_bits=5)


def test_the_tolerance_is_the_dtype_rounding():
    rows = rows_of(shape(interface="canonical")).numpy()
    one_ulp, two_ulps = rows.copy(), rows.copy()
    assert rows[3, 15] == 1.0  # bit 0 of id 3, read last (msb first)
    one_ulp[3, 15] = np.nextafter(rows[3, 15], np.float32(2))
    two_ulps[3, 15] = np.nextafter(one_ulp[3, 15], np.float32(2))
    assert infer_code(one_ulp).kind == "canonical"
    assert infer_code(one_ulp).max_deviation == pytest.approx(np.finfo(np.float32).eps, rel=1e-6)
    refused = infer_code(two_ulps)
    assert refused.kind is None and refused.reason.startswith("almost but not exactly a code: 1 of")
    assert "token 3, column 15" in refused.reason
    noisy = torch.from_numpy(rows) + 1e-3 * torch.randn(rows.shape, generator=torch.Generator().manual_seed(0))
    assert infer_code(noisy).kind is None  # float32 noise of 0.1% of the scale is not a code...
    assert infer_code(noisy.bfloat16()).kind == "canonical"  # ...but stored in bfloat16 it rounds away


def test_a_padded_embedding_is_read_up_to_the_vocabulary():
    rows = rows_of(shape(interface="gf2"))
    padded = torch.cat([rows, torch.zeros(11, rows.shape[1])])
    assert infer_code(padded).kind is None
    assert infer_code(padded, vocab_size=333).kind == "gf2"


def test_tables_that_are_not_a_code_say_why():
    g = torch.Generator().manual_seed(0)
    canon = rows_of(shape(interface="canonical"))
    dup = canon.clone()
    dup[5] = dup[4]
    shuffled = canon.clone()
    shuffled[:, 16:] = shuffled[:, 16:].flip(-1)  # the second copy in another column order
    distinct = np.random.default_rng(0).choice(1 << 16, 300, replace=False)  # 300 different 16-bit rows
    binary = torch.from_numpy(code_table(1 << 16, 16)[distinct])
    cases = {
        "take many values": torch.randn(333, 32, generator=g),
        "no bit varies": torch.ones(333, 32),
        "a code renders -s/\\+s": canon + 3,
        "tokens 4 and 5 have the same": dup,
        "do not repeat": shuffled,
        "not an affine function": binary,
    }
    for reason, rows in cases.items():
        found = infer_code(rows)
        assert found.kind is None and not found and found.config_fields() == {}
        assert __import__("re").search(reason, found.reason), (reason, found.reason)
        with pytest.raises(AnalysisError, match="not a code"):
            found.apply(shape())
    frozen = infer_code(rows_of(shape(interface="frozen_random")))
    assert frozen.kind is None and "many values" in frozen.reason


def test_the_permuted_control_is_named_by_a_seed_it_can_find():
    rows = rows_of(shape(interface="permuted", table_seed=300))
    assert infer_code(rows).kind is None and "table_seed below 256" in infer_code(rows).reason
    assert infer_code(rows, max_seed=301).table_seed == 300


def test_bad_input_is_refused():
    for rows, match in [(np.zeros(5), "non-empty"), (np.array([[np.nan, 1.0]]), "NaN"),
                        (np.array([["a", "b"]]), "real numbers")]:
        with pytest.raises(AnalysisError, match=match):
            infer_code(rows)
    with pytest.raises(AnalysisError, match="vocab_size"):
        infer_code(np.ones((4, 4)), vocab_size=5)
    found = infer_code(rows_of(shape(interface="canonical")))
    with pytest.raises(AnalysisError, match="333 x 32"):
        found.apply(shape(vocab=300))
