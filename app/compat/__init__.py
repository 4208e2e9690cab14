"""etj's changes to faust-streaming and aiokafka, one module per part of them it changes.

Faust and aiokafka carry the worker's guarantees (nothing lost, nothing committed unhandled)
only with these changes. Each module is the single place where its upstream class is changed:

- subclasses wired through Faust's own extension points (upstream's classes untouched):
  :mod:`~app.compat.consumer` (the transport's ``Consumer`` and ``Producer`` classes, under
  ``EtjApp._new_transport``), :mod:`~app.compat.consumer_thread` (the consumer's thread class),
  :mod:`~app.compat.producer` (the transport's ``Producer``, its buffer, the app's ``Topic``
  setting), :mod:`~app.compat.table_manager` (the app's ``TableManager`` setting) and
  :mod:`~app.compat.recovery` (its recovery service), :mod:`~app.compat.stores` (the app's
  ``Table`` setting and ``RangeTable``: the stores they open) with
  :mod:`~app.compat.rocksdb_memory` (those stores' RocksDB options);
- real monkeypatches, only where no extension point reaches the class (installed by
  :func:`install`): :mod:`~app.compat.log_gaps` (aiokafka's ``FetchResult``),
  :mod:`~app.compat.leave_group` (aiokafka's ``GroupCoordinator``).

In the order a record meets them: a fetch (:mod:`~app.compat.log_gaps`,
:mod:`~app.compat.consumer_thread`) -> its records handed to the agents' inboxes and their
offsets committed by range (:mod:`~app.compat.consumer`; changelog records stepped in place,
:mod:`~app.compat.eager_delivery`) -> tables recovered from their changelogs
(:mod:`~app.compat.table_manager`, :mod:`~app.compat.recovery`,
:mod:`~app.compat.changelog_holes`) and kept in their stores (:mod:`~app.compat.stores`,
:mod:`~app.compat.rocksdb_memory`, :mod:`~app.compat.table_codec`; etj's reads and writes of
them: :mod:`app.state.store_io`)
-> produced (:mod:`~app.compat.producer`) -> the group left at a stop
(:mod:`~app.compat.leave_group`). The machinery: :mod:`~app.compat.versions` (the tested
releases), :mod:`~app.compat.upstream` (what each patch replaces, and its hash: the registry a
worker imports), :mod:`~app.compat.upstream_audit` (the upgrade audit: each patch's docstring,
the code that replaces upstream unregistered), :mod:`~app.compat.release_check`
(``make compat-check``).

Every patch's docstring has one form (upstream behaviour, symptom, the test that reproduces it,
when to remove), and records a hash of the upstream source it was written against
(:mod:`app.compat.upstream`); ``docs/contributing/patches.md`` is generated from them
(:mod:`app.docgen.patches_doc`).
They reach into private attributes, so they are tested against exact versions
(:mod:`app.compat.versions`): outside that range the worker refuses to start.
"""

from __future__ import annotations

from typing import Any

from app.compat import leave_group, log_gaps, rocksdb_memory
from app.compat.producer import register_broker_errors
from app.compat.versions import check_versions

__all__ = ["install"]

_installed: set[int] = set()


def install(app: Any) -> None:
    """Check the versions, install the monkeypatches and make the worker's RocksDB budgets
    (idempotent per app). The subclasses need no install: ``app.faust_app.create_app`` names
    them in the app's settings."""
    check_versions()
    if id(app) in _installed:
        return
    _installed.add(id(app))
    settings = app.etj
    register_broker_errors()
    log_gaps.install()
    leave_group.install()
    rocksdb_memory.configure(settings.rocksdb_block_cache_mb, settings.rocksdb_memtables_mb)
