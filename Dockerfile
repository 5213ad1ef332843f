# fedctl container image: a static binary on an empty base.
#   docker build -t fedctl .
#   docker run --rm fedctl --version
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler file && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN scripts/build-static.sh && cp target/x86_64-unknown-linux-gnu/release/fedctl /fedctl

FROM scratch
COPY --from=build /fedctl /fedctl
USER 65532:65532
ENTRYPOINT ["/fedctl"]
CMD ["--help"]
