# farebox's image: the package `npm pack` makes of this checkout, installed on the newest Node LTS. deploy/k8s.yaml
# and deploy/compose.yaml run it as registry.example.com/farebox:<package.json version> (test/package.test.ts checks):
#
#   docker build -t registry.example.com/farebox:0.1.0 .
#
# It runs `farebox serve` as user node; FAREBOX_CONFIG names the operator's config (deploy/README.md). Without one it
# serves the embedded default (simulated upstreams, dev chains) on 127.0.0.1 inside the container.
ARG NODE_IMAGE=node:26-trixie-slim

# Build: the checkout's dependencies (dev ones included: tsc, solc), the build, and the package.
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# No scripts: `prepare` would build sources not copied yet; the build below needs no dependency's install script.
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY . .
RUN npm run build && mkdir /pkg && npm pack --ignore-scripts --pack-destination /pkg && mv /pkg/farebox-*.tgz /pkg/farebox.tgz

# Run: the package and its runtime dependencies alone, installed as any user of it would.
FROM ${NODE_IMAGE}
ENV NODE_ENV=production
COPY --from=build /pkg/farebox.tgz /tmp/farebox.tgz
RUN npm install --global --no-audit --no-fund /tmp/farebox.tgz && rm /tmp/farebox.tgz && npm cache clean --force
USER node
WORKDIR /home/node
EXPOSE 8080 9464
CMD ["farebox", "serve"]
