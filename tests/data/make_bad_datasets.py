#!/usr/bin/env python3
"""make_bad_datasets.py OUT_DIR — writes the data-set files that the reader
tests (tests/data_tests.cmake) feed to dataset_check: two valid files written
the way h5py writes things (other integer widths, variable- and fixed-length
strings) and one broken file per validation rule. Each bad file differs from
the valid base in exactly one respect, so each test checks one rule."""
import os
import sys

import h5py
import numpy as np

OUT = sys.argv[1]
VOCAB = ["<eos>", "<unk>"] + ["w%d" % i for i in range(2, 10)]  # vocab_size 10
TOKENS = [2, 3, 0, 4, 5, 6, 0, 9, 8, 0]                         # 3 sequences
OFFSETS = [0, 3, 7, 10]


def write(name, tokens=TOKENS, offsets=OFFSETS, vocab=VOCAB, attrs=None, drop=(),
          token_dtype=np.int32, offset_dtype=np.int64, fixed_strings=False):
    a = {"format": "rnn_dist-lm", "format_version": 1, "vocab_size": 10,
         "eos_id": 0, "unk_id": 1}
    a.update(attrs or {})
    with h5py.File(os.path.join(OUT, name), "w") as f:
        for k, v in a.items():
            if k in drop:
                continue
            if isinstance(v, str):
                f.attrs[k] = np.bytes_(v) if fixed_strings else v
            else:
                f.attrs[k] = np.int32(v)
        if "tokens" not in drop:
            f["tokens"] = np.array(tokens, dtype=token_dtype)
        if "offsets" not in drop:
            f["offsets"] = np.array(offsets, dtype=offset_dtype)
        if "vocab" not in drop:
            if fixed_strings:
                f["vocab"] = np.array([w.encode() for w in vocab], dtype="S8")
            else:
                f["vocab"] = np.array(vocab, dtype=h5py.string_dtype())


def main():
    os.makedirs(OUT, exist_ok=True)
    write("good.h5", token_dtype=np.uint16, offset_dtype=np.int32)
    write("good_fixed_strings.h5", fixed_strings=True, token_dtype=np.int64)
    write("token_range.h5", tokens=[2, 3, 10, 4, 5, 6, 0, 9, 8, 0])
    write("negative_id.h5", tokens=[2, -3, 0, 4, 5, 6, 0, 9, 8, 0])
    write("empty.h5", tokens=[], offsets=[0])
    write("offsets_empty.h5", tokens=[], offsets=[])
    write("offsets_not_increasing.h5", offsets=[0, 3, 3, 10])
    write("first_offset.h5", offsets=[1, 3, 7, 10])
    write("last_offset.h5", offsets=[0, 3, 7, 9])
    write("missing_tokens.h5", drop=("tokens",))
    write("missing_offsets.h5", drop=("offsets",))
    write("wrong_rank.h5", tokens=np.array(TOKENS[:10]).reshape(2, 5))
    write("float_tokens.h5", token_dtype=np.float32)
    write("format_version2.h5", attrs={"format_version": 2})
    write("no_format_version.h5", drop=("format_version",))
    write("wrong_format.h5", attrs={"format": "something-else"})
    write("no_vocab_size.h5", drop=("vocab_size",))
    write("eos_out_of_range.h5", attrs={"eos_id": 10})
    write("unk_negative.h5", attrs={"unk_id": -1})
    write("vocab_length.h5", vocab=VOCAB[:9])
    write("missing_vocab.h5", drop=("vocab",))
    with h5py.File(os.path.join(OUT, "tokens_group.h5"), "w") as f:
        for k, v in {"format": "rnn_dist-lm", "format_version": 1, "vocab_size": 10,
                     "eos_id": 0, "unk_id": 1}.items():
            f.attrs[k] = v if isinstance(v, str) else np.int32(v)
        f["offsets"] = np.array(OFFSETS, dtype=np.int64)
        f.create_group("tokens")
    with open(os.path.join(OUT, "not_hdf5.h5"), "w") as f:
        f.write("this is a text file, not HDF5\n")
    print("bad data sets written to " + OUT)


if __name__ == "__main__":
    main()
