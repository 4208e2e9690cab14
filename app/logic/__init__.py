"""Pure join logic: no Faust, no Kafka, no clock. Shared by the stream agents, the batch twin and tests.

Time is always passed in as integer epoch milliseconds so that tests drive it.
"""
