#!/usr/bin/env bash
# prepare_bible.sh [--labels] OUT_TEXT_DIR — writes the built-in default corpus, the King
# James Bible from Debian's bible-kjv package (no download), as WikiText-style
# text for rnn_prep: OUT_TEXT_DIR/{train,valid,test}.txt.
#
#  - one verse per line, the reference ("Ge1:1 ") stripped; continuation lines
#    (bible wraps long verses when given a line width) are joined to their verse;
#  - lowercased; each of  , . ; : ? ! ( ) '  becomes a token of its own
#    ("the earth." -> "the earth .", "king's" -> "king ' s"); hyphenated words
#    such as "loving-kindness" stay one word;
#  - split by verse number v, counted from 1 over the whole book:
#    v % 20 == 0 -> valid, v % 20 == 10 -> test, everything else -> train.
# Then: rnn_prep --train DIR/train.txt --valid DIR/valid.txt --test DIR/test.txt --out OUT
#
# --labels writes a classification corpus instead (model.task = classify,
# rnn_prep --labels): every line is "DIVISION<TAB>verse", the division of the
# book the verse comes from, one of six: law (Genesis-Deuteronomy), history
# (Joshua-Esther), wisdom (Job-Song of Solomon), prophets (Isaiah-Malachi),
# gospels (Matthew-Acts), letters (Romans-Revelation).
set -euo pipefail
export LC_ALL=C

labels=0
if [ "${1:-}" = "--labels" ]; then labels=1; shift; fi
if [ $# -ne 1 ] || [ "${1:-}" = "--help" ]; then
  echo "usage: prepare_bible.sh [--labels] OUT_TEXT_DIR" >&2
  exit 2
fi
if ! command -v bible >/dev/null 2>&1; then
  echo "prepare_bible.sh: error: the 'bible' program is not installed (Debian package bible-kjv: apt-get install bible-kjv)" >&2
  exit 1
fi
out=$1
mkdir -p "$out"
# Write into a scratch directory next to the output and move the files at the
# end, so an interrupted run never leaves a truncated train.txt behind.
tmp=$(mktemp -d "$out/.prepare_bible.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

bible -f Gen1:1-Rev22:21 | perl -e '
  use strict; use warnings;
  my ($dir, $labels) = @ARGV;
  my %division;
  my @groups = (
    [law => qw(Ge Exo Lev Num Deu)],
    [history => qw(Josh Jdgs Ruth 1Sm 2Sm 1Ki 2Ki 1Chr 2Chr Ezra Neh Est)],
    [wisdom => qw(Job Psa Prv Eccl SSol)],
    [prophets => qw(Isa Jer Lam Eze Dan Hos Joel Amos Obad Jonah Mic Nahum Hab Zep Hag Zec Mal)],
    [gospels => qw(Mat Mark Luke John Acts)],
    [letters => qw(Rom 1Cor 2Cor Gal Eph Phi Col 1Th 2Th 1Tim 2Tim Titus Phmn Heb Jas 1Pet 2Pet 1Jn 2Jn 3Jn Jude Rev)]);
  for my $g (@groups) { my ($name, @books) = @$g; $division{$_} = $name for @books; }
  my %fh;
  for my $s (qw(train valid test)) {
    open($fh{$s}, ">", "$dir/$s.txt") or die "prepare_bible.sh: error: $dir/$s.txt: $!\n";
  }
  my ($verse, $book, $n) = (undef, undef, 0);
  sub emit {
    my ($text, $from) = @_;
    $n++;
    $text = lc $text;
    $text =~ s/([,.;:?!()\x27])/ $1 /g;
    $text =~ s/\s+/ /g;
    $text =~ s/^ | $//g;
    my $split = $n % 20 == 0 ? "valid" : $n % 20 == 10 ? "test" : "train";
    if ($labels) {
      my $d = $division{$from} // die "prepare_bible.sh: error: book $from is in no division\n";
      $text = "$d\t$text";
    }
    print { $fh{$split} } "$text\n";
  }
  while (my $line = <STDIN>) {
    chomp $line;
    if ($line =~ /^([0-9]?[A-Za-z]+)[0-9]+:[0-9]+\s+(.*)$/) {
      emit($verse, $book) if defined $verse;
      ($book, $verse) = ($1, $2);
    } elsif ($line =~ /\S/) {
      die "prepare_bible.sh: error: text before the first verse: $line\n" unless defined $verse;
      $verse .= " $line";
    }
  }
  emit($verse, $book) if defined $verse;
  die "prepare_bible.sh: error: bible printed no verses\n" if $n == 0;
  for my $s (keys %fh) { close($fh{$s}) or die "prepare_bible.sh: error: $dir/$s.txt: $!\n"; }
  print "$n verses\n";
' "$tmp" "$labels"

for s in train valid test; do mv "$tmp/$s.txt" "$out/$s.txt"; done
echo "wrote $out/train.txt ($(wc -l <"$out/train.txt") verses), $out/valid.txt ($(wc -l <"$out/valid.txt")), $out/test.txt ($(wc -l <"$out/test.txt"))"
