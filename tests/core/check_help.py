#!/usr/bin/env python3
"""--help must list every verb, every command-line option of the option
tables in src/tools/rnn_dist_main.c and every configuration key of
src/config.c's table, and every shipped config in configs/ must parse
(rnn_dist --dry-run). usage: check_help.py RNN_DIST CONFIG_C CONFIGS_DIR MAIN_C"""
import glob
import os
import re
import subprocess
import sys

rnn_dist, config_c, configs, main_c = sys.argv[1:5]
text = subprocess.run([rnn_dist, "--help"], capture_output=True, text=True, check=True).stdout
keys = re.findall(r'^\s*\{"(model|data|train|amp|comm|metrics|output)", "(\w+)", KEY_', open(config_c).read(), re.M)
failures = []
if len(keys) < 30:
    failures.append(f"found only {len(keys)} keys in {config_c}")
for section, key in keys:
    if not re.search(rf"^\s+{section}\.{key}\s", text, re.M):
        failures.append(f"--help does not list {section}.{key}")
table_options = re.findall(r'\{"([a-z-]+)", (?:required|no)_argument', open(main_c).read())
if len(table_options) < 20:
    failures.append(f"found only {len(table_options)} options in {main_c}'s tables")
OPTIONS = sorted({"--" + o for o in table_options}) + ["train", "eval", "generate", "predict", "--help", "--version"]
for option in OPTIONS:
    if option not in text:
        failures.append(f"--help does not mention {option}")
shipped = sorted(glob.glob(os.path.join(configs, "*.ini")))
for path in shipped:
    r = subprocess.run([rnn_dist, "--config", path, "--dry-run"], capture_output=True, text=True)
    if r.returncode != 0 or "[model]" not in r.stdout:
        failures.append(f"{path} does not parse: {r.stderr.strip()}")
for name in ["quickstart.ini", "wikitext2_gru.ini", "wikitext2_lstm.ini"]:
    if not os.path.exists(os.path.join(configs, name)):
        failures.append(f"configs/{name} is missing")
for f in failures:
    print("FAIL " + f)
checks = len(keys) + len(OPTIONS) + len(shipped) + 3
print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
