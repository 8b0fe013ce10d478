# syntax=docker/dockerfile:1
# Build stage: install everything, check the generated code compiles, build
# (the service, and the explorer bundled into dist/ui).
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json buf.yaml buf.gen.yaml ./
COPY proto ./proto
COPY gen ./gen
COPY src ./src
COPY ui ./ui
COPY scripts ./scripts
RUN npm run build && npm prune --omit=dev

# Runtime stage: production dependencies and the compiled service only.
# It listens on 0.0.0.0, which the service allows only with authentication:
# run it with API_TOKENS (or API_TOKENS_FILE) or OIDC_ISSUER set, and
# DATABASE_URL / S3_* for a production database and object store.
FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    DATA_DIR=/data
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
# SIGTERM drains in-flight calls before the process exits.
CMD ["node", "dist/src/main.js"]
