# redis-ratelimit-server: the rate-limit service (Envoy RLS v3 gRPC + HTTP JSON API), on the
# same base as the Redis image (so the same glibc the binary was checked against).
#
#   make docker        # builds redis-ratelimit (Redis + module) and this image
#   docker run -v $PWD/examples/envoy/config:/etc/ratelimit/config:ro redis-ratelimit-server \
#     --redis redis://redis:6379/ --grpc-listen 0.0.0.0:8081 --http-listen 0.0.0.0:8080
ARG REDIS_IMAGE=redis-ratelimit:latest
FROM ${REDIS_IMAGE}
LABEL org.opencontainers.image.title="redis-ratelimit-server" \
      org.opencontainers.image.description="A rate-limit service on redis-ratelimit: Envoy's RLS v3 over gRPC and an HTTP JSON API"
COPY redis-ratelimit-server /usr/local/bin/redis-ratelimit-server
COPY config /etc/ratelimit/config
EXPOSE 8080 8081
# The Redis image's entrypoint is replaced: this one runs the service, not redis-server.
USER redis
ENTRYPOINT ["/usr/local/bin/redis-ratelimit-server", "--config", "/etc/ratelimit/config"]
CMD ["--redis", "redis://redis:6379/", "--grpc-listen", "0.0.0.0:8081", "--http-listen", "0.0.0.0:8080"]
