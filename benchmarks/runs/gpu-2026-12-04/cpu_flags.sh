#!/usr/bin/env bash
# Ad hoc: on this (CPU) machine, how often a fresh process finds its first drafting pass far from what its
# warm-up said (generate --json's policy.warm_up_off): the demo and chat pairs, temperatures 0 and 0.8, three
# prompts, each a fresh process with an empty remembered-costs file.
set -u
tmp=$(mktemp -d)
for pair in demo demo-chat; do for temp in 0 0.8; do for prompt in \
    "The lighthouse keeper had not seen a ship in eleven days when, one grey morning," \
    "def merge_intervals(intervals):" "User: What should I pack for a three-day hiking trip?
Assistant:"; do
  echo '{}' > "$tmp/costs.json"
  SPECLLAMA_COSTS_FILE="$tmp/costs.json" python -m specllama generate --pair $pair -p "$prompt" -n 64 --temp $temp \
    --seed 5 --ignore-eos --json 2>/dev/null | python -c "
import json, sys; d = json.load(sys.stdin); p = d['policy']
print('$pair', $temp, repr(sys.argv[1][:12]), 'warm_up_off', p['warm_up_off'], 'drafting passes', p['drafting_passes'],
      'of', d['n_target_passes'], 'warm-up ms', {k: round(v, 1) for k, v in p['warm_up_ms'].items()})" "$prompt"
done; done; done
rm -rf "$tmp"
