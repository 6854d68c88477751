#!/usr/bin/env bash
# Installs the MinIO server the S3 tests start (store, cli, compat), built from its Go module
# at a pinned version, into a cache directory that later runs reuse. Prints the binary's path.
#
#   .ci/minio.sh            # build once (a few minutes on 2 cores), then reuse
#   export OPENXET_MINIO="$(.ci/minio.sh)" OPENXET_REQUIRE_S3=1
#
# The tests look for the binary in $OPENXET_MINIO, then in the cache directory below, then
# as "minio" on PATH; with OPENXET_REQUIRE_S3=1 a missing binary fails them instead of
# skipping.
set -euo pipefail
version=v0.0.0-20260212201848-7aac2a2c5b7c
dir="${OPENXET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/openxet}/minio-$version"
if [ ! -x "$dir/minio" ]; then
	mkdir -p "$dir"
	tmp="$(mktemp -d "$dir/.build.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	# GOFLAGS=-mod=mod: build outside this module's go.mod; GOBIN into a temp dir so a build
	# that fails halfway never leaves a binary the next run would trust.
	echo "building minio $version into $dir (a few minutes)" >&2
	(cd "$tmp" && GOFLAGS=-mod=mod GOBIN="$tmp" go install "github.com/minio/minio@$version")
	mv "$tmp/minio" "$dir/minio"
fi
echo "$dir/minio"
