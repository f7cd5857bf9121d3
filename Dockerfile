# Image of the provisioner and of its cleanup Jobs (JOB_CONTAINER_IMAGE).
# Not built in CI (no Docker engine there); `docker build -t local-static-provisioner .`
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/bundle.ts ./scripts/
COPY src ./src
# Type-check, then one esbuild bundle per entry point in dist/ (scripts/bundle.ts, docs/performance.md §6).
RUN npx tsc -p tsconfig.build.json --noEmit && node scripts/bundle.ts && npm prune --omit=dev --ignore-scripts

FROM node:24-bookworm-slim
# The cleaners shell out to these (wipefs, blkdiscard, shred, mkfs, ionice).
RUN apt-get update \
 && apt-get install -y --no-install-recommends util-linux e2fsprogs bash coreutils findutils \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY deployment/scripts /scripts
RUN chmod +x /scripts/*.sh
# V8's young generation capped at 1 MiB semi-spaces (default up to 16 MiB each): ~30 MiB less RSS,
# no more CPU (docs/performance.md §6). Override with NODE_OPTIONS in the pod spec.
ENV PATH="/sbin:/usr/sbin:${PATH}" NODE_ENV=production NODE_OPTIONS="--max-semi-space-size=1"
# No --enable-source-maps: it parses the bundle's source map at every start (~1 s CPU, ~20 MiB);
# set NODE_OPTIONS=--enable-source-maps in the pod to get src/*.ts positions in stack traces.
ENTRYPOINT ["node", "/app/dist/main.js"]
