# syntax=docker/dockerfile:1
#
# pool_worker container image.
#
#   docker build -t pool-worker .
#   docker run --init --env-file deploy/pool-worker.env -e INSTANCE_NUMBER=1 pool-worker
#
# Run it with an init process (`--init`, or `init: true` in compose): the
# worker starts jobs in their own process groups, and orphans must be reaped.
# Jobs run inside this image: derive your own image from it and install what
# your orders need (see docs/deploy.md).

############################ build ############################
FROM rust:1-bookworm AS builder

# librdkafka is built from source by rdkafka-sys (its own configure + make, or
# cmake with the `cmake-build` feature); the -dev packages cover the optional
# `ssl`, `gssapi`/SASL and `libz` features. (Versions are not pinned: bookworm's
# stable updates are security fixes.)
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        build-essential pkg-config cmake python3 \
        libssl-dev libsasl2-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# The cache mounts keep the crates.io download and the compiled dependencies
# (librdkafka takes minutes) between builds; the binary is copied out of the
# cached target directory because that directory is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin pool_worker \
    && install -D -m 0755 target/release/pool_worker /out/pool_worker

############################ run ############################
FROM debian:bookworm-slim

# ca-certificates for TLS brokers; libssl3 and libsasl2-2 are what the `ssl`
# and `gssapi` features link against (zlib1g is already in the base image).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 libsasl2-2 \
    && rm -rf /var/lib/apt/lists/*

# A fixed, unprivileged uid; its home is the jobs' working directory.
RUN groupadd --system --gid 10001 pool \
    && useradd --system --uid 10001 --gid pool --home-dir /home/pool --create-home \
        --shell /usr/sbin/nologin pool

COPY --from=builder /out/pool_worker /usr/local/bin/pool_worker

USER 10001:10001
WORKDIR /home/pool
ENTRYPOINT ["pool_worker"]
