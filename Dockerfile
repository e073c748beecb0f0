# Wardline: multi-stage build. The build stage compiles TypeScript with the dev dependencies; the
# runtime stage holds only production dependencies and dist/, and runs as the unprivileged `node` user.
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
# The audit spill file lives here (mount a volume so it survives the container).
RUN mkdir -p /var/lib/wardline && chown node:node /var/lib/wardline
USER node
EXPOSE 8080
# Liveness, not readiness: /readyz turns 503 during a database outage while calls are still served
# (docs/postgres.md). WARDLINE_HEALTH_URL follows a `listen` port other than 8080. A service that runs
# something else from this image (the example MCP server in docker-compose.yml) sets its own check.
ENV WARDLINE_HEALTH_URL=http://127.0.0.1:8080/healthz
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s \
  CMD ["node", "-e", "fetch(process.env.WARDLINE_HEALTH_URL).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/src/main.js"]
CMD ["serve", "--config", "/etc/wardline/wardline.yaml"]
