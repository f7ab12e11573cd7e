#!/usr/bin/env bash
# Bad input to `kata dict`, `kata bounds`, `kata psnr`: exit 2, one clear line on stderr naming what
# was wrong, no output file, and never a NaN printed as a result. Env: KATA (the kata executable).
set -u
: "${KATA:?set KATA to the kata executable}"
TOOL=$KATA
# shellcheck source=expect_error.sh
source "$(dirname "$0")/expect_error.sh"

# s not a prime power
expect 2 "not a prime power"       -- dict --type mub --field-size 6
expect 2 "not a prime power"       -- dict --type mub --field-size 1
expect 2 "not a prime power"       -- dict --type devore --field-size 12 --degree 2
expect 2 "not a prime power"       -- psnr --keys mub --field-size 10 --T 16
# r >= s
expect 2 "0 <= r < s"              -- dict --type devore --field-size 5 --degree 5
expect 2 "0 <= r < s"              -- dict --type devore --field-size 5 --degree -1
# T <= 0 and other bad counts
expect 2 "T = 0 must be"           -- bounds welch --keys 0
expect 2 "T = -5 must be"          -- bounds welch --keys -5
expect 2 "T = 0 must be"           -- bounds table1 --keys 0
expect 2 "T = -3 must be"          -- psnr --T -3
expect 2 "T = 1 must be"           -- psnr --T 1
expect 2 "--count must be >= 1"    -- dict --type random --dim 8 --count 0
expect 2 "--dim must be >= 1"      -- dict --type random --dim 0 --count 8
# eps / mu / tau outside their domain
expect 2 "must lie in \[0, 1\)"    -- bounds psd --p 64 --eps 1.5
expect 2 "must lie in \[0, 1\)"    -- bounds psd --p 64 --eps -0.1
expect 2 "outside \[0, 1/2\]"      -- bounds rankin --dim 64 --eps 0.7
expect 2 "outside \[0, 1/2\]"      -- bounds rankin --dim 64 --eps -0.2
expect 2 "must lie in \[0, 1\]"    -- bounds welch --eps 2
expect 2 "must lie in \[0, 1\]"    -- bounds welch --mu -0.3
expect 2 "in \(0, 1\)"             -- bounds table1 --mu 0
expect 2 "max-coherence"           -- dict --type greedy --dim 8 --max-coherence 1.2
expect 2 "tau"                     -- psnr --tau 0 --T 100
expect 2 "tau"                     -- psnr --tau -1 --T 100
expect 2 "eps must be"             -- dict --type random --dim 8 --count 4 --map orthant:eps=-1
# a p (or d) for which a formula is vacuous
expect 2 "p = 1 makes"             -- bounds psd --p 1 --eps 0.25
expect 2 "p = 1 makes"             -- psnr --p 1 --T 100
expect 2 "needs d >= 3"            -- bounds rankin --dim 2 --convention ambient
# unknown names
expect 2 "kind|welch"              -- bounds foo
expect 2 "type|random"             -- dict --type foo
expect 2 "unknown pSNR rung"       -- psnr --rungs linear,cubic --T 100
expect 2 "unknown feature map"     -- dict --type random --dim 8 --count 4 --map relu

if [[ $fails -ne 0 ]]; then echo "$fails failure(s)"; exit 1; fi
echo "all kata theory error cases ok"
