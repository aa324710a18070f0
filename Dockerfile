# mnemo: multi-stage image on Debian 12.
#
#   docker build -t mnemo .
#   docker run --rm -p 50051:50051 -p 9090:9090 mnemo [extra mnemo-server flags]
#
# The builder stage runs the same scripts as a developer machine (scripts/setup.sh,
# scripts/build.sh). The runtime stage installs only the runtime libraries listed in
# deploy/runtime-packages.txt (checked against the binaries' ldd by
# tests/integration/runtime_deps_test.sh) and runs as a non-root user.

FROM debian:12 AS builder
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# Dependencies first, so editing the sources does not reinstall them.
COPY scripts/setup.sh scripts/setup.sh
RUN bash scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# Tests are not needed in the image; build with --build-arg MNEMO_BUILD_TESTS=ON to keep them.
ARG MNEMO_BUILD_TESTS=OFF
RUN --mount=type=cache,target=/root/.cache/ccache \
    MNEMO_BUILD_TESTS=${MNEMO_BUILD_TESTS} MNEMO_BUILD_TYPE=Release MNEMO_BUILD_DIR=/src/build \
    bash scripts/build.sh mnemo-server mnemo-cli mnemo-model
# Binaries, stripped, and the bundled model (models/mnemo-stdlib) -- or, in a checkout without
# it, a randomly initialised one (the server then works but its text is gibberish by design).
RUN mkdir -p /out/bin /out/models \
 && cp build/server/mnemo-server build/clients/cpp/mnemo build/tools/mnemo-model /out/bin/ \
 && strip --strip-unneeded /out/bin/* \
 && if [ -f models/mnemo-stdlib/config.json ]; then mkdir -p /out/models/default \
      && cp models/mnemo-stdlib/config.json models/mnemo-stdlib/model.safetensors \
            models/mnemo-stdlib/README.md /out/models/default/; \
    else /out/bin/mnemo-model init --out /out/models/default --seed 1; fi

FROM debian:12
ENV DEBIAN_FRONTEND=noninteractive
COPY deploy/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && sed -e 's/#.*//' /tmp/runtime-packages.txt | xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --uid 10001 --user-group --home-dir /var/lib/mnemo --create-home --shell /usr/sbin/nologin mnemo
COPY --from=builder /out/bin/mnemo-server /out/bin/mnemo /out/bin/mnemo-model /usr/local/bin/
COPY --from=builder /out/models/ /opt/mnemo/models/
USER mnemo
WORKDIR /var/lib/mnemo
EXPOSE 50051 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 CMD ["mnemo", "--address", "127.0.0.1:50051", "--timeout", "3s", "health"]
ENTRYPOINT ["mnemo-server", "--model", "/opt/mnemo/models/default", "--listen", "0.0.0.0:50051", "--metrics_listen", "0.0.0.0:9090"]
CMD []
