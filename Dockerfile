# syntax=docker/dockerfile:1
# Multi-stage build of the one `cairn` binary (orchestrator, worker and CLI in one).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    SQLX_OFFLINE=true cargo build --release --locked -p cairn-cli \
    && cp target/release/cairn /usr/local/bin/cairn

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home /var/lib/cairn cairn \
    && mkdir -p /var/lib/cairn && chown cairn /var/lib/cairn
COPY --from=build /usr/local/bin/cairn /usr/local/bin/cairn
USER cairn
WORKDIR /var/lib/cairn
EXPOSE 7400 7401
ENTRYPOINT ["cairn"]
CMD ["serve", "--http", "0.0.0.0:7400", "--grpc", "0.0.0.0:7401"]
