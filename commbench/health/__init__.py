"""Link health: the counters that reveal a sick link, snapshot before and after every run.

`record` holds the typed snapshot (`HealthSnapshot`, per GPU and per RDMA port), `capture`
takes one from NVML and sysfs without ever raising, `findings` compares two of them and says,
in a person's words, what moved and which link runs below its maximum.
"""
