#!/bin/sh
# Regenerate configure and Makefile.in (autoconf, automake, pkg-config's m4).
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf --install --force
