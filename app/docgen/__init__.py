"""The pages the code writes, each from one source, so that they cannot drift from it.

- :mod:`app.docgen.settings_doc` — from :mod:`app.settings`: the settings page, the Helm values
  page and the chart's values schema;
- :mod:`app.docgen.topics_doc` — from the join specs: the topics page (every topic a worker
  reads, writes or creates, and the ACLs it needs);
- :mod:`app.docgen.patches_doc` — from the patches' docstrings (:mod:`app.compat`): the patches
  page;
- :mod:`app.docgen.tests_index` — from the tests' imports and texts: the tests page's table from
  a module of ``app/`` to the test files that cover it;
- :mod:`app.docgen.generated_files` — each generator's write and ``--check`` (``python -m
  app.docgen.<generator> [--check]``).

The worker never imports this package; the tests hold each page to what its generator gives.
"""
