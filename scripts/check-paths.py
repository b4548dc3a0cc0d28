#!/usr/bin/env python3
"""Every `src/...rs`, `tests/...rs`, `benches/...rs` or `pool_worker/...`
path named in the repository's text files must exist (at the top or, for a
bare src/ path written inside pool_worker/, in that package)."""
import re, subprocess, os, sys
files = subprocess.run(['git', 'ls-files'], capture_output=True, text=True).stdout.split()
pat = re.compile(r'(?<![\w./-])((?:pool_worker/)?(?:src|tests|benches)/[A-Za-z0-9_./-]*[A-Za-z0-9_]\.(?:rs|toml|md))|(?<![\w./-])(core/Cargo\.toml)')
bad = 0
for f in files:
    if not f.endswith(('.rs', '.md', '.toml', '.sh', '.yaml', '.yml', '.txt')) and f != 'Dockerfile':
        continue
    if f.startswith('testdata/'):
        continue
    try:
        text = open(f, encoding='utf-8').read()
    except Exception:
        continue
    for n, line in enumerate(text.split('\n'), 1):
        for m in pat.finditer(line):
            p = m.group(1) or m.group(2)
            ok = os.path.exists(p) or (not p.startswith('pool_worker/') and f.startswith('pool_worker/') and os.path.exists('pool_worker/' + p))
            if not ok:
                bad += 1
                print(f'{f}:{n}: {p}')
sys.exit(1 if bad else 0)
