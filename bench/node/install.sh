#!/usr/bin/env bash
# Installs the Node.js peers of the comparison (graphile-worker, pg-boss) at the
# versions package-lock.json pins, into bench/node/node_modules. It needs node
# (20 or later) and npm: Debian's, `apt-get install nodejs npm`.
set -euo pipefail
cd "$(dirname "$0")"

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "install.sh: $tool not found: install Debian's nodejs and npm (apt-get install nodejs npm)" >&2
		exit 1
	fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
	echo "install.sh: node $(node --version) is too old: the peers need 20 or later" >&2
	exit 1
fi
# npm ci installs exactly what the lock file holds, and fails if package.json
# and the lock file disagree.
npm ci --no-audit --no-fund --loglevel=error
echo "install.sh: graphile-worker $(node -p 'require("graphile-worker/package.json").version'), pg-boss $(node -p 'require("pg-boss/package.json").version') installed in $(pwd)/node_modules"
