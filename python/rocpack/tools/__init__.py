"""rocm-kpack's command lines, run by rocpack's ``kpack``.

``python -m rocpack.tools.split_artifacts``, ``.recombine_artifacts`` and
``.verify_artifacts`` accept the flags of ``python -m
rocm_kpack.tools.<same name>`` and write the same layout, so a build
switches by changing the module name. Each flag and what rocpack does with
it: docs/python.md. Unknown flags fail (exit 2) naming them.
"""
