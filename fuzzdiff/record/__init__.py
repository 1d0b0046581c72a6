"""The corpus record (docs/pages/design.md, contract 4): its format, a Record
and a Case to JSON and back; its files, written atomically, read, found and
merged; and the in-flight journal that turns a crash or a hang into a record.
"""
