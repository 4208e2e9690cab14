"""One settings object for the whole worker, read from ``ETJ_*`` environment variables.

Every topic name is a setting so that tests (and several deployments on one cluster) can run
side by side on the same broker without seeing each other's records.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

#: the joins etj comes with (app.joins.catalog: moods, movies; app.agents.car_join: cars)
BUILTIN_JOINS = frozenset({"moods", "movies", "cars"})


class Settings(BaseSettings):
    """etj configuration. ``python -m app.docgen.settings_doc`` generates docs/operating/settings.md
    and the chart's values schema from these fields and descriptions."""

    model_config = SettingsConfigDict(env_prefix="ETJ_", extra="ignore")

    app_id: str = Field("etj", description="Faust app id: consumer group and changelog prefix.")
    broker_url: str = Field("kafka://127.0.0.1:9092", description="Kafka bootstrap URL(s).")
    store_url: str = Field("memory://", description="Table store: `memory://` or `rocksdb://`.")
    datadir: Path = Field(Path("var/etj"), description="Faust data directory (RocksDB state).")
    rocksdb_write_buffer_mb: int = Field(
        4,
        ge=1,
        description="RocksDB memtable size of each table partition, in MiB (Faust's "
        "default: 64); all memtables together are bounded by `ETJ_ROCKSDB_MEMTABLES_MB`.",
    )
    rocksdb_memtables_mb: int = Field(
        32,
        ge=1,
        description="RocksDB memtables of all table partitions of the worker together, "
        "in MiB: past it, one is flushed (docs/operating/scaling.md#memory).",
    )
    rocksdb_block_cache_mb: int = Field(
        64,
        ge=1,
        description="RocksDB block cache shared by all table partitions of the worker, "
        "in MiB; index and filter blocks included (Faust's default: 2,048 per table partition).",
    )
    event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop",
        description="Event loop of the worker: `uvloop` (runs the loop in C; ~15-20 % "
        "more records/s, docs/contributing/performance-log.md) or `asyncio` (the standard library's).",
    )
    web_port: int = Field(6066, description="Port of the Faust web server (views, health).")
    web_bind: str = Field("0.0.0.0", description="Address the web server binds.")
    web_host: str = Field(
        "127.0.0.1", description="Host name other workers use to reach this one's views."
    )
    partitions: int = Field(4, ge=1, description="Partition count of every topic etj creates.")
    replication_factor: int = Field(1, ge=1, description="Replication of created topics.")

    moods_topic: str = Field("etj-moods", description="Input: consultant moods.")
    events_topic: str = Field("etj-events", description="Input: recommendations.")
    output_topic: str = Field(
        "etj-mood-recommendations", description="Output: revision log of mood joins."
    )
    ticks_topic: str = Field(
        "etj-mood-ticks", description="Internal: revisit ticks, co-partitioned with the inputs."
    )
    car_arrivals_topic: str = Field("etj-car-arrivals", description="Input: car positions.")
    zones_topic: str = Field("etj-zones", description="Input: zone pollution levels.")
    car_moves_topic: str = Field(
        "etj-car-moves", description="Internal: DEL/ADD of cars, keyed by zone id."
    )
    car_ticks_topic: str = Field(
        "etj-car-ticks",
        description="Internal: the car join's revisit ticks, one per owned partition (co-"
        "partitioned with the zone side's inputs).",
    )
    car_pollution_topic: str = Field("etj-car-pollution", description="Output: car view.")
    movies_topic: str = Field("etj-movies", description="Input: movie versions (join movies).")
    ratings_topic: str = Field("etj-ratings", description="Input: ratings (join movies).")
    rated_movies_topic: str = Field(
        "etj-rated-movies", description="Output: revision log of ratings x movies."
    )
    movie_ticks_topic: str = Field(
        "etj-movie-ticks", description="Internal: revisit ticks of the movies join."
    )
    dead_letter_topic: str = Field("etj-dead-letters", description="Malformed/invalid records.")
    late_topic: str = Field("etj-late", description="Records older than the retention horizon.")

    retention_ms: int = Field(
        3_600_000,
        ge=1,
        description="Event-time retention: state older than stream time minus this is purged, "
        "records older are late.",
    )
    revisit_interval_s: float = Field(
        5.0, gt=0, description="Wall-clock seconds between revisit ticks per partition."
    )
    review_lag_ms: int = Field(
        300_000,
        ge=0,
        description="Each revisit re-checks the joins within this much event time of stream time.",
    )
    movie_retention_ms: int = Field(
        30 * 86_400_000,
        ge=1,
        description="Join movies: how long ratings stay correctable "
        "(and held, waiting for their movie).",
    )
    movie_window_ms: int = Field(
        30 * 86_400_000,
        ge=1,
        description="Join movies: only ratings this close to stream time "
        "are emitted; older ones go to the late topic.",
    )
    flow_control: bool = Field(
        True,
        description="Under a backlog, handle the joined inputs of a partition in event-time "
        "order (waiting for an input known to have records in the broker); false: arrival order.",
    )
    flow_max_idle_ms: int = Field(
        2_000,
        ge=0,
        description="Flow control: longest wait for a lagging input before the "
        "other input's records go anyway.",
    )
    flow_max_buffered: int = Field(
        10_000,
        ge=1,
        description="Flow control: records waiting per partition past which the "
        "worker stops fetching that partition's inputs that have records until the lagging one "
        "caught up (bounds memory; a wait still ends after ETJ_FLOW_MAX_IDLE_MS).",
    )
    stall_check_s: float = Field(
        5.0,
        gt=0,
        description="Seconds between checks for an input partition whose fetched "
        "records never reached its agent (read again from the first unhandled; see app/loop/stall_guard.py).",
    )
    joins_file: Path | None = Field(
        None,
        description="JSON file of join specs (see docs/joins/declarative.md): with it, a "
        "worker runs that file's joins and only the built-in ones ETJ_BUILTIN_JOINS names.",
    )
    builtin_joins: str | None = Field(
        None,
        description="The built-in joins this worker runs, comma-separated, of `moods`, "
        "`movies`, `cars` (`none`: none). Unset: all three without ETJ_JOINS_FILE, none with "
        "it (a worker of your own joins then creates none of the built-in joins' topics; the "
        "dead-letter and late topics, `etj-dead-letters` and `etj-late` by default, are every "
        "worker's; `make run` asks for all).",
    )
    snapshot_url: str | None = Field(
        None,
        description="Object store of table snapshots: `file:///path` or "
        "`s3://bucket/prefix` (endpoint and credentials the usual boto3 way: "
        "`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...). With `rocksdb://`, a worker snapshots "
        "the table partitions it owns, and one with no local state starts from the newest "
        "snapshot instead of replaying the whole changelog (docs/operating/snapshots.md); "
        "unset: no snapshots.",
    )
    snapshot_interval_s: float = Field(
        300.0,
        gt=0,
        description="Seconds between snapshots of each owned table partition "
        "(taken only when its changelog offset moved).",
    )
    snapshot_keep: int = Field(
        3, ge=1, description="Snapshots kept per table partition (older ones are deleted)."
    )
    producer_max_batch_size: int | None = Field(
        None,
        ge=1,
        description="Faust `producer_max_batch_size`; 1 for the local tansu broker (exact "
        "changelog recovery), unset = Faust's default.",
    )
    end_offsets_by_fetch: bool = Field(
        False,
        description="Ask each partition's end offset with a Fetch as well as ListOffsets "
        "and take the larger (app/compat/consumer_thread.py): the bundled tansu broker's ListOffsets "
        "under-reports batched partitions, so with this on it can run with producer batching. "
        "Not needed on Apache Kafka, Redpanda or a managed Kafka.",
    )
    producer_max_request_bytes: int | None = Field(
        None,
        ge=1,
        description="Faust `producer_max_request_size`: the producer refuses a record bigger "
        "than this. A refused output sends the input that produced it to the dead letters "
        "(docs/concepts/guarantees.md#outputs-the-broker-refuses); unset = Faust's default "
        "(1,000,000 bytes).",
    )
    producer_linger_ms: float = Field(
        5.0,
        ge=0,
        description="How long the producer waits to fill a batch before it sends (Kafka's "
        "`linger.ms`, Faust's `producer_linger`): a batch of changelog rows or revisions then "
        "goes in one request instead of many; adds at most this to a revision's latency.",
    )
    producer_delivery_timeout_s: float = Field(
        120.0,
        gt=0,
        description="How long a produced record may wait for the broker: a request unanswered "
        "after Faust's PRODUCER_REQUEST_TIMEOUT is sent again until then; past it the worker "
        "exits without committing (fail-stop; see app/outputs/delivery.py).",
    )
    consumer_fetch_max_wait_ms: int | None = Field(
        None,
        ge=1,
        description="How long a fetch may wait at the broker; 100 for the local tansu broker "
        "(it holds fetches for the full wait), unset = Faust's 1500.",
    )
    untested_versions: bool = Field(
        False,
        description="Start with a faust-streaming or aiokafka other than the ones the "
        "patches of app/compat were tested with, logging a warning instead of refusing: for "
        "trying a release (`make compat-check` sets it), never in production.",
    )
    group_instance_id: str | None = Field(
        None,
        min_length=1,
        description="Static membership: this worker's stable identity in the consumer group "
        "(Kafka's `group.instance.id`, Faust's `consumer_group_instance_id`); unique per "
        "worker, the same across its restarts. A worker stopped with one does not leave the "
        "group: its partitions wait for it (no rebalance) until `ETJ_SESSION_TIMEOUT_S` "
        "passes, and it gets them back when it returns within it. Unset = dynamic "
        "membership: every stop and start rebalances the group. The chart sets it to the "
        "pod's name (docs/operating/scaling.md#rolling-restarts).",
    )
    session_timeout_s: float = Field(10.0, gt=0, description="Consumer group session timeout.")
    heartbeat_interval_s: float = Field(1.0, gt=0, description="Consumer heartbeat interval.")
    rebalance_timeout_s: float = Field(10.0, gt=0, description="Consumer rebalance timeout.")
    commit_interval_s: float = Field(1.0, gt=0, description="Offset commit interval.")
    stop_drain_s: float = Field(
        2.0,
        ge=0,
        description="On SIGTERM: longest wait for the batches in flight to reach "
        "the broker; then what is delivered is committed and the rest left unacked for the next "
        "owner (EtjApp._consumer_wait_empty). Keep it well under the pod's grace period.",
    )

    # secrets: each one from its file (a mounted Kubernetes Secret) or, else, the environment
    kafka_tls: bool = Field(
        False,
        description="Connect to Kafka over TLS (implied by a TLS file below); the "
        "system's CAs are trusted unless `ETJ_KAFKA_TLS_CA_FILE` is set.",
    )
    kafka_tls_ca_file: Path | None = Field(
        None, description="PEM file of the CA(s) that sign the brokers' certificates."
    )
    kafka_tls_cert_file: Path | None = Field(
        None, description="PEM file of this client's certificate (mutual TLS)."
    )
    kafka_tls_key_file: Path | None = Field(
        None, description="PEM file of this client's private key (mutual TLS)."
    )
    kafka_tls_key_password_file: Path | None = Field(
        None, description="File holding the password of the client key (if it is encrypted)."
    )
    kafka_tls_key_password: SecretStr | None = Field(
        None, description="Password of the client key, when no file gives it."
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None,
        description="SASL mechanism (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`); unset: "
        "no SASL. Over TLS when TLS is on (SASL_SSL), else SASL_PLAINTEXT.",
    )
    kafka_sasl_username: str | None = Field(None, description="SASL user name.")
    kafka_sasl_password_file: Path | None = Field(
        None, description="File holding the SASL password."
    )
    kafka_sasl_password: SecretStr | None = Field(
        None, description="SASL password, when no file gives it."
    )
    schema_registry_url: str | None = Field(
        None,
        description="Confluent Schema Registry (`http://host:8081` or `https://…`): needed by "
        "a join spec side whose `format` is `avro`, `protobuf` or `json-sr` (or `key_format` "
        "`avro`) and by an `output_format` other than `json`; over https, the CA and client "
        "certificate of `ETJ_KAFKA_TLS_CA_FILE` / `ETJ_KAFKA_TLS_CERT_FILE` / "
        "`ETJ_KAFKA_TLS_KEY_FILE` are used when set (docs/joins/declarative.md#schema-registry-formats).",
    )
    schema_registry_username: str | None = Field(
        None, description="Schema Registry basic-auth user (unset: no authentication)."
    )
    schema_registry_password_file: Path | None = Field(
        None, description="File holding the Schema Registry basic-auth password."
    )
    schema_registry_password: SecretStr | None = Field(
        None, description="Schema Registry basic-auth password, when no file gives it."
    )
    schema_registry_cache: int = Field(
        1_000,
        ge=1,
        description="Writer schemas kept per worker (the least recently used is dropped past "
        "it; a record whose schema was dropped makes it fetched again).",
    )
    views_token_file: Path | None = Field(
        None,
        description="File holding the bearer token the state views require "
        "(health, readiness and metrics stay open); unset with `ETJ_VIEWS_TOKEN`: views open.",
    )
    views_token: SecretStr | None = Field(
        None, description="Bearer token of the state views, when no file gives it."
    )
    check_partitioner: bool = Field(
        True,
        description="Refuse (dead-letter) an input record whose partition is not Kafka's "
        "default partitioner's choice (murmur2) for its key: a librdkafka producer's default "
        "(CRC32) splits keys across co-partitioned inputs and the join answers wrong. false: "
        "for inputs partitioned otherwise on purpose, every input of a join the same way.",
    )
    max_future_ms: int = Field(
        300_000,
        ge=0,
        description="Records from the future: an input record whose event time "
        "is more than this ahead of min(its Kafka timestamp, the wall clock) is refused (a "
        "dead letter naming the skew), never joined, never moves stream time; the worker and "
        "the batch twin apply the same rule "
        "(docs/concepts/event-time.md#records-from-the-future). Default 5 min: far above "
        "the clock skew of honest producers (NTP: milliseconds; phones: seconds), below every "
        "time-zone mistake (30 min or more), and small against the retention: an accepted "
        "record moves stream time at most this far ahead, so with the default 1 h retention "
        "records up to 55 min late still join (a 1 h tolerance would let one record push every "
        "on-time record behind the horizon). A spec side's own `max_future_ms` replaces it for "
        "that side (a dimension whose versions take effect later), and such a record moves "
        "stream time only as far as this would let it.",
    )

    @property
    def builtins(self) -> frozenset[str]:
        """The built-in joins this worker runs (ETJ_BUILTIN_JOINS)."""
        if self.builtin_joins is None:
            return frozenset() if self.joins_file is not None else BUILTIN_JOINS
        names = {n.strip() for n in self.builtin_joins.split(",") if n.strip()} - {"none"}
        unknown = names - BUILTIN_JOINS
        if unknown:
            raise ValueError(
                f"ETJ_BUILTIN_JOINS: unknown join(s) {', '.join(sorted(unknown))}; "
                f"the built-in ones are {', '.join(sorted(BUILTIN_JOINS))}"
            )
        return frozenset(names)

    @property
    def local_tables(self) -> bool:
        """Are the tables kept on the worker's disk (``rocksdb://``), not in memory? Snapshots
        and the crash rule (app.state.crash_marker) apply only then."""
        return str(self.store_url).startswith("rocksdb:")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
