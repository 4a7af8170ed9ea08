# redis-ratelimit: Redis with the rate-limit module loaded through a config file.
#
#   make docker                          # builds the module, then this image (see README)
#   docker run -p 127.0.0.1:6379:6379 redis-ratelimit   # loopback only: no password (README)
#
# BASE_IMAGE is the Redis image the module is added to: by default the official one. It must
# be Debian-based (glibc) like the machine that built the module; `make docker` checks that,
# and builds a local base from the machine's own redis-server when the official image cannot
# be pulled. By hand: `make build && docker build -t redis-ratelimit .`
ARG BASE_IMAGE=redis:7.4-bookworm
FROM ${BASE_IMAGE}
ARG MODULE=target/release/libredis_ratelimit.so
LABEL org.opencontainers.image.title="redis-ratelimit" \
      org.opencontainers.image.description="Redis with native rate-limit commands (RL.TOKENBUCKET, RL.SLIDING, RL.FIXED, RL.SLIDINGLOG, CL.THROTTLE)"
COPY ${MODULE} /usr/lib/redis/modules/libredis_ratelimit.so
COPY docker/redis-ratelimit.conf /etc/redis/redis-ratelimit.conf
WORKDIR /data
VOLUME /data
EXPOSE 6379
# No ENTRYPOINT: the official image's own (which drops root for the redis user) is kept;
# the local base has none and runs as the redis user already.
CMD ["redis-server", "/etc/redis/redis-ratelimit.conf"]
