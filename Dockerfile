# Image of the provisioner and of its cleanup Jobs (JOB_CONTAINER_IMAGE).
# `docker build -t local-static-provisioner .` or, without a Docker engine,
# `node scripts/build-image.ts` (buildah; docs/deployment.md "The image").

# Behind a TLS-intercepting proxy, pass its CA bundle to the npm steps only
# (it is not kept in the image): `--secret id=build_ca,src=/path/to/ca.pem`.

# Production dependencies only: no devDependency reaches the image. Type
# declarations (*.d.ts, @types/*) and source maps of the dependencies are never
# loaded at run time (40 of the 96 MB of @kubernetes/client-node): dropped.
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=secret,id=build_ca \
    if [ -s /run/secrets/build_ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/build_ca; fi \
 && npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
 && find node_modules -type d -name '@types' -prune -exec rm -rf {} + \
 && find node_modules -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \) -delete \
 && rm -rf /root/.npm

# Compile TypeScript with the full dependency set.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=secret,id=build_ca \
    if [ -s /run/secrets/build_ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/build_ca; fi \
 && npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npx tsc -p tsconfig.build.json

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
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --chmod=0755 deployment/scripts /scripts
ENV NODE_ENV=production
# Cleanup Jobs set `command` (/scripts/*.sh or the block cleaner), which replaces this.
ENTRYPOINT ["/usr/bin/tini", "--", "node", "--enable-source-maps", "/app/dist/main.js"]
