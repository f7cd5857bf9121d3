# Image of the provisioner and of its cleanup Jobs (JOB_CONTAINER_IMAGE).
# `docker build -t local-static-provisioner .` or, without a Docker engine,
# `node scripts/build-image.ts` (buildah; docs/deployment.md "The image").

# Behind a TLS-intercepting proxy, pass its CA bundle to the npm step only
# (it is not kept in the image): `--secret id=build_ca,src=/path/to/ca.pem`.

# Type-check, then one esbuild bundle per entry point in dist/ (scripts/bundle.ts,
# docs/performance.md §6). The bundle holds every dependency it uses, so the
# final image carries no node_modules at all.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=secret,id=build_ca \
    if [ -s /run/secrets/build_ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/build_ca; fi \
 && npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/bundle.ts ./scripts/
COPY src ./src
RUN npx tsc -p tsconfig.build.json --noEmit && node scripts/bundle.ts

FROM node:24-bookworm-slim
# The cleaners shell out to wipefs, blkdiscard, mkfs.ext4, shred, ionice,
# unshare, find and mountpoint (util-linux, e2fsprogs, coreutils, findutils);
# tini is PID 1: it forwards SIGTERM to node and reaps orphaned children.
# npm and the node user of the base image are not needed at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini util-linux e2fsprogs bash coreutils findutils \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/apt /var/log/dpkg.log
WORKDIR /app
COPY package.json ./
COPY --from=build /app/dist ./dist
COPY --chmod=0755 deployment/scripts /scripts
# V8's young generation capped at 1 MiB semi-spaces (default up to 16 MiB each): ~30 MiB less RSS,
# no more CPU; one V8 worker thread instead of four: ~2 MiB less (docs/performance.md §6). Override with
# NODE_OPTIONS in the pod spec.
# No --enable-source-maps: it parses the bundle's source map at every start (~1 s CPU, ~20 MiB);
# set NODE_OPTIONS=--enable-source-maps in the pod to get src/*.ts positions in stack traces.
ENV NODE_ENV=production NODE_OPTIONS="--max-semi-space-size=1 --v8-pool-size=1"
# V8's code cache of both bundles in /app/dist/.compile-cache, made here with the NODE_OPTIONS above, as root
# (the user the pod runs as): every start, the first included, reads it instead of compiling the 3.8 MiB of
# JavaScript (docs/performance.md §6). It stays valid while the image does; read-only is fine. V8 keys it by its
# flags: once with the ENTRYPOINT's --max-opt=1, once without (a `command` such as node-cleanup's).
RUN node --max-opt=1 /app/dist/warm-compile-cache.js && node /app/dist/warm-compile-cache.js
# --max-opt=1: V8 compiles hot functions with its baseline compiler (Sparkplug) only, never with Maglev or
# TurboFan: the daemon's JavaScript is short bursts of glue around I/O, and those compilers' own code and work
# cost ~12 MiB of RSS and no less CPU (docs/performance.md §6, "V8's tiers"). V8 refuses it in NODE_OPTIONS.
# Cleanup Jobs set `command` (/scripts/*.sh or the block cleaner), which replaces this.
ENTRYPOINT ["/usr/bin/tini", "--", "node", "--max-opt=1", "/app/dist/main.js"]
