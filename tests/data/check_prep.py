#!/usr/bin/env python3
"""check_prep.py — end-to-end checks of rnn_prep against hand-derived answers.

Usage: check_prep.py RNN_PREP DATA_DIR WORK_DIR

Runs rnn_prep on tests/data/small_{train,valid,test}.txt with several option
sets and compares the HDF5 output (read with h5py) with vocabularies and
token ids worked out by hand below; then checks a larger synthetic corpus
against an independent Python implementation of the vocabulary rules (this
also exercises hash-table growth and chunking at 1<<16 tokens), --help, and
that a failed run leaves no output behind. Exits non-zero on the first
mismatch with a message saying what differed.
"""
import collections
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

PREP, DATA, WORK = sys.argv[1], sys.argv[2], sys.argv[3]

# small_train.txt, line by line ("." etc. are ordinary words):
#   1 ""                              blank -> dropped
#   2 " = Title = "
#   3 "the cat sat on the mat ."
#   4 "   "                           whitespace only -> dropped
#   5 "The dog sat ."
#   6 "the cat saw <unk> ."           literal <unk> -> id 1, not a word
#   7 ""
#   8 "a dog and The cat"
#   9 "\tthe  mat\t is <unk> "        tabs / repeated spaces
#  10 "Zebra"
#  11 "\t"
#  12 "end .\r"                       CR counts as whitespace; no final newline
# Counts: the 4, . 4, cat 3, = 2, sat 2, mat 2, The 2, dog 2, then 1 each:
# Title on saw a and is Zebra end. Ties keep first-occurrence order
# (= before sat before mat before The before dog; the before .).
TRAIN_LINES = ["= Title =", "the cat sat on the mat .", "The dog sat .",
               "the cat saw <unk> .", "a dog and The cat", "the mat is <unk>",
               "Zebra", "end ."]
VALID_LINES = ["the cat sat on a zebra .", "<unk> dog Dog"]
TEST_LINES = ["end of The story", "<eos> <unk>"]

VOCAB_DEFAULT = ["<eos>", "<unk>", "the", ".", "cat", "=", "sat", "mat", "The",
                 "dog", "Title", "on", "saw", "a", "and", "is", "Zebra", "end"]
# --lowercase: The merges into the (6), Title/Zebra become title/zebra.
VOCAB_LOWER = ["<eos>", "<unk>", "the", ".", "cat", "=", "sat", "mat", "dog",
               "title", "on", "saw", "a", "and", "is", "zebra", "end"]
# --min-count 2: only the words seen at least twice survive.
VOCAB_MIN2 = ["<eos>", "<unk>", "the", ".", "cat", "=", "sat", "mat", "The", "dog"]
# --max-vocab 5: the two specials plus the three most frequent words.
VOCAB_MAX5 = ["<eos>", "<unk>", "the", ".", "cat"]

# Expected ids of the default run, by hand (0 = <eos>, 1 = <unk>).
TRAIN_IDS = [[5, 10, 5, 0], [2, 4, 6, 11, 2, 7, 3, 0], [8, 9, 6, 3, 0],
             [2, 4, 12, 1, 3, 0], [13, 9, 14, 8, 4, 0], [2, 7, 15, 1, 0],
             [16, 0], [17, 3, 0]]
VALID_IDS = [[2, 4, 6, 11, 13, 1, 3, 0], [1, 9, 1, 0]]   # zebra, Dog unknown
TEST_IDS = [[17, 1, 8, 1, 0], [0, 1, 0]]                 # literal <eos> -> 0


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


def run_prep(args, want_rc=0):
    r = subprocess.run([PREP] + args, capture_output=True, text=True)
    if r.returncode != want_rc:
        fail("rnn_prep %s: exit %d, expected %d\nstdout:\n%s\nstderr:\n%s"
             % (" ".join(args), r.returncode, want_rc, r.stdout, r.stderr))
    return r


def small_args(out, test=True, extra=()):
    a = ["--train", os.path.join(DATA, "small_train.txt"),
         "--valid", os.path.join(DATA, "small_valid.txt"), "--out", out]
    if test:
        a += ["--test", os.path.join(DATA, "small_test.txt")]
    return a + list(extra)


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


TOKEN_CHUNK = 1 << 14  # /tokens chunks: small, a batch reads its pieces chunk by chunk


def read_file(path, deflate=0):
    with h5py.File(path, "r") as f:
        expect(f.attrs["format"] == "rnn_dist-lm", "%s: format attribute %r" % (path, f.attrs["format"]))
        for name, want in (("format_version", 1), ("eos_id", 0), ("unk_id", 1)):
            expect(int(f.attrs[name]) == want, "%s: %s = %r" % (path, name, f.attrs[name]))
            expect(f.attrs[name].dtype == np.int32, "%s: %s dtype %s" % (path, name, f.attrs[name].dtype))
        tok, off = f["tokens"], f["offsets"]
        expect(tok.dtype == np.int32 and tok.ndim == 1, "%s: /tokens %s %dD" % (path, tok.dtype, tok.ndim))
        expect(off.dtype == np.int64 and off.ndim == 1, "%s: /offsets %s %dD" % (path, off.dtype, off.ndim))
        expect(tok.chunks == (TOKEN_CHUNK,), "%s: /tokens chunks %r for %d tokens" % (path, tok.chunks, len(tok)))
        if deflate:
            expect(tok.compression == "gzip" and tok.compression_opts == deflate and tok.shuffle,
                   "%s: /tokens filters %r %r shuffle=%r" % (path, tok.compression, tok.compression_opts, tok.shuffle))
        else:
            expect(tok.compression is None and not tok.shuffle,
                   "%s: /tokens filters %r shuffle=%r without --deflate" % (path, tok.compression, tok.shuffle))
        vocab = [w.decode("utf-8") if isinstance(w, bytes) else w for w in f["vocab"][...]]
        expect(h5py.check_string_dtype(f["vocab"].dtype).encoding == "utf-8", "%s: /vocab not UTF-8" % path)
        expect(int(f.attrs["vocab_size"]) == len(vocab), "%s: vocab_size %r vs %d words"
               % (path, f.attrs["vocab_size"], len(vocab)))
        return vocab, tok[...].tolist(), off[...].tolist()


def split(tokens, offsets):
    expect(offsets[0] == 0 and offsets[-1] == len(tokens), "offsets ends %r" % offsets)
    return [tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def ids_from_lines(lines, vocab):
    """Independent encoding: words outside the vocabulary -> <unk>, add <eos>."""
    index = {w: i for i, w in enumerate(vocab)}
    return [[index.get(w, 1) for w in line.split()] + [0] for line in lines]


def check_run(out, vocab_want, train_ids=None, lower=False, names=("train", "valid", "test")):
    lines = {"train": TRAIN_LINES, "valid": VALID_LINES, "test": TEST_LINES}
    for name in names:
        path = os.path.join(out, name + ".h5")
        vocab, tokens, offsets = read_file(path)
        expect(vocab == vocab_want, "%s: vocab\n  got  %r\n  want %r" % (path, vocab, vocab_want))
        seqs = split(tokens, offsets)
        text = [l.lower() if lower else l for l in lines[name]]
        want = ids_from_lines(text, vocab_want)
        expect(seqs == want, "%s: sequences\n  got  %r\n  want %r" % (path, seqs, want))
        for s in seqs:
            expect(s[-1] == 0 and len(s) >= 2, "%s: sequence %r does not end in one <eos>" % (path, s))
    if train_ids is not None:
        _, tokens, offsets = read_file(os.path.join(out, "train.h5"))
        expect(split(tokens, offsets) == train_ids, "train ids differ from the hand-derived ones")
    left = [f for f in os.listdir(out) if f.endswith(".tmp")]
    expect(not left, "%s: temporary files left behind: %r" % (out, left))


def check_small():
    out = fresh("default")
    r = run_prep(small_args(out))
    expect("vocabulary: 18 entries" in r.stdout, "summary lacks vocab size:\n" + r.stdout)
    expect("train.h5: 8 sequences, 39 tokens" in r.stdout, "train summary:\n" + r.stdout)
    # valid has 12 tokens of which 3 are <unk> (zebra, <unk>, Dog): 25.00%.
    expect("valid.h5: 2 sequences, 12 tokens (incl. <eos>), 3 <unk> (25.00%)" in r.stdout,
           "valid summary:\n" + r.stdout)
    check_run(out, VOCAB_DEFAULT, TRAIN_IDS)
    _, tok, _ = read_file(os.path.join(out, "valid.h5"))
    expect(tok == sum(VALID_IDS, []), "valid ids %r" % tok)
    _, tok, _ = read_file(os.path.join(out, "test.h5"))
    expect(tok == sum(TEST_IDS, []), "test ids %r" % tok)

    out = fresh("deflate")  # the same content, compressed
    run_prep(small_args(out, extra=["--deflate", "4"]))
    for name in ("train", "valid", "test"):
        plain = read_file(os.path.join(WORK, "default", name + ".h5"))
        expect(read_file(os.path.join(out, name + ".h5"), deflate=4) == plain, "--deflate 4: %s differs" % name)

    out = fresh("lower")
    run_prep(small_args(out, extra=["--lowercase"]))
    check_run(out, VOCAB_LOWER, lower=True)
    _, tok, _ = read_file(os.path.join(out, "valid.h5"))
    expect(tok[5] == VOCAB_LOWER.index("zebra") and tok[-2] == VOCAB_LOWER.index("dog"),
           "--lowercase: zebra/Dog in valid should now be known: %r" % tok)

    out = fresh("min2")
    run_prep(small_args(out, extra=["--min-count", "2"]))
    check_run(out, VOCAB_MIN2)

    out = fresh("max5")
    run_prep(small_args(out, extra=["--max-vocab", "5"]))
    check_run(out, VOCAB_MAX5)

    out = fresh("nested/a/b")  # --out creates parents; no --test -> no test.h5
    run_prep(small_args(out, test=False))
    check_run(out, VOCAB_DEFAULT, names=("train", "valid"))
    expect(sorted(os.listdir(out)) == ["train.h5", "valid.h5"], "files %r" % os.listdir(out))


def check_large():
    """~150k tokens, 20k types: compare with a Python implementation."""
    rng = np.random.default_rng(7)
    zipf = np.minimum(rng.zipf(1.3, size=150000), 20000)
    words = ["w%d" % z for z in zipf]
    lines, i = [], 0
    while i < len(words):
        n = int(rng.integers(1, 40))
        lines.append(" ".join(words[i:i + n]))
        i += n
        if len(lines) % 7 == 0:
            lines.append("")
    train = os.path.join(WORK, "large_train.txt")
    with open(train, "w") as f:
        f.write("\n".join(lines) + "\n")
    counts = collections.Counter(words)
    first = {}
    for w in words:
        first.setdefault(w, len(first))
    order = sorted(counts, key=lambda w: (-counts[w], first[w]))
    for min_count, max_vocab in ((1, 0), (3, 0), (1, 1000)):
        kept = [w for w in order if counts[w] >= min_count]
        if max_vocab:
            kept = kept[:max_vocab - 2]
        vocab_want = ["<eos>", "<unk>"] + kept
        out = fresh("large")
        run_prep(["--train", train, "--valid", train, "--out", out,
                  "--min-count", str(min_count), "--max-vocab", str(max_vocab)])
        vocab, tokens, offsets = read_file(os.path.join(out, "train.h5"))
        expect(vocab == vocab_want, "large corpus (min-count %d, max-vocab %d): vocab differs "
               "(%d vs %d entries)" % (min_count, max_vocab, len(vocab), len(vocab_want)))
        want = ids_from_lines([l for l in lines if l.strip()], vocab_want)
        expect(split(tokens, offsets) == want, "large corpus: token ids differ")
    with h5py.File(os.path.join(out, "train.h5"), "r") as f:
        expect(f["tokens"].chunks == (TOKEN_CHUNK,), "large /tokens chunks %r" % (f["tokens"].chunks,))


def check_help():
    r = run_prep(["--help"])
    for opt in ("--train", "--valid", "--test", "--out", "--min-count", "--max-vocab",
                "--lowercase", "--deflate", "--help"):
        expect(opt in r.stdout, "--help does not mention " + opt)


def check_atomic():
    # A bad --valid must fail before anything is written: an existing
    # train.h5 keeps its old contents and nothing new appears.
    out = fresh("atomic")
    os.makedirs(out)
    with open(os.path.join(out, "train.h5"), "w") as f:
        f.write("old\n")
    r = run_prep(["--train", os.path.join(DATA, "small_train.txt"), "--valid",
                  os.path.join(out, "missing.txt"), "--out", out], want_rc=2)
    expect(len(r.stderr.splitlines()) == 1 and "missing.txt: cannot open" in r.stderr,
           "stderr: %r" % r.stderr)
    expect(os.listdir(out) == ["train.h5"], "files after failure: %r" % os.listdir(out))
    with open(os.path.join(out, "train.h5")) as f:
        expect(f.read() == "old\n", "train.h5 was modified by a failed run")
    # A bad split met late (invalid UTF-8 on the valid file's last line):
    # no output directory is created, no scratch file is left behind.
    bad = os.path.join(WORK, "bad_valid.txt")
    with open(bad, "wb") as f:
        f.write(b"fine words\nbad \xff byte\n")
    new = os.path.join(fresh("atomic_new"), "deeper")
    r = run_prep(["--train", os.path.join(DATA, "small_train.txt"), "--valid", bad, "--out", new], want_rc=2)
    expect("bad_valid.txt:2: invalid UTF-8" in r.stderr, "stderr: %r" % r.stderr)
    expect(not os.path.exists(os.path.dirname(new)), "a failed run created %s" % os.path.dirname(new))
    expect(not [n for n in os.listdir(WORK) if n.startswith(".rnn_prep")], "scratch file left in %s" % WORK)


def main():
    os.makedirs(WORK, exist_ok=True)
    check_small()
    check_large()
    check_help()
    check_atomic()
    print("check_prep: all checks passed")


if __name__ == "__main__":
    main()
