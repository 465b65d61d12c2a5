// Structured mutation of protobuf messages through reflection, for the fuzzers whose inputs are
// serialized protos (executables, modules). Byte-level mutation of a proto mostly yields bytes that
// do not parse, or changes a varint into garbage; this changes one field the way a bug or a crafted
// file would: an index off by one, a size at a boundary, an element dropped or repeated, an enum out
// of range. Deterministic for a given seed, so libFuzzer can replay it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>

namespace lazyrt::fuzz {

class ProtoMutator {
 public:
  explicit ProtoMutator(uint32_t seed) : rng_(seed) {}

  // Applies 1 to 3 mutations to `message`.
  void Mutate(google::protobuf::Message& message) {
    const int rounds = 1 + static_cast<int>(Below(3));
    for (int i = 0; i < rounds; ++i) MutateOnce(message);
  }

 private:
  using Message = google::protobuf::Message;
  using Field = google::protobuf::FieldDescriptor;

  // A place to mutate: a field of a message, and for a repeated field the element (-1: the field as
  // a whole, to add, remove or reorder elements).
  struct Site {
    Message* message;
    const Field* field;
    int index;
  };

  uint64_t Below(uint64_t n) { return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

  void CollectSites(Message& message, std::vector<Site>& sites, int depth) {
    const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
    const google::protobuf::Reflection* reflection = message.GetReflection();
    for (int f = 0; f < descriptor->field_count(); ++f) {
      const Field* field = descriptor->field(f);
      if (field->is_repeated()) {
        sites.push_back({&message, field, -1});
        const int size = reflection->FieldSize(message, field);
        for (int i = 0; i < size; ++i) {
          if (field->cpp_type() == Field::CPPTYPE_MESSAGE) {
            if (depth < 8) CollectSites(*reflection->MutableRepeatedMessage(&message, field, i), sites, depth + 1);
          } else {
            sites.push_back({&message, field, i});
          }
        }
      } else if (field->cpp_type() == Field::CPPTYPE_MESSAGE) {
        if (reflection->HasField(message, field) && depth < 8) {
          CollectSites(*reflection->MutableMessage(&message, field), sites, depth + 1);
        }
        sites.push_back({&message, field, -1});  // clear it or create it
      } else {
        sites.push_back({&message, field, -1});
      }
    }
  }

  // Every integer value in the message: the values a mutated index most plausibly collides with.
  void CollectInts(const Message& message, std::vector<int64_t>& ints, int depth) {
    const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
    const google::protobuf::Reflection* reflection = message.GetReflection();
    for (int f = 0; f < descriptor->field_count(); ++f) {
      const Field* field = descriptor->field(f);
      const int size = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
      for (int i = 0; i < size && ints.size() < 4096; ++i) {
        switch (field->cpp_type()) {
          case Field::CPPTYPE_INT64:
            ints.push_back(field->is_repeated() ? reflection->GetRepeatedInt64(message, field, i)
                                                : reflection->GetInt64(message, field));
            break;
          case Field::CPPTYPE_MESSAGE:
            if (depth < 8 && (field->is_repeated() || reflection->HasField(message, field))) {
              CollectInts(field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                               : reflection->GetMessage(message, field),
                          ints, depth + 1);
            }
            break;
          default: break;
        }
      }
    }
  }

  // Wrapping arithmetic (through uint64_t): the mutator itself must not overflow.
  static int64_t Wrap(uint64_t v) { return static_cast<int64_t>(v); }

  int64_t NewInt(int64_t old) {
    const uint64_t u = static_cast<uint64_t>(old);
    switch (Below(10)) {
      case 0: return Wrap(u + 1);
      case 1: return Wrap(u - 1);
      case 2: return 0;
      case 3: return -1;
      case 4: return std::numeric_limits<int64_t>::max() - static_cast<int64_t>(Below(2));
      case 5: return std::numeric_limits<int64_t>::min() + static_cast<int64_t>(Below(2));
      case 6: return int64_t{1} << Below(63);
      case 7: return Wrap(u * 2 + Below(2));
      case 8: return ints_.empty() ? old : ints_[Below(ints_.size())];
      default: return static_cast<int64_t>(Below(64)) - 8;
    }
  }

  double NewDouble(double old) {
    switch (Below(7)) {
      case 0: return 0;
      case 1: return -old;
      case 2: return std::numeric_limits<double>::quiet_NaN();
      case 3: return std::numeric_limits<double>::infinity();
      case 4: return -std::numeric_limits<double>::infinity();
      case 5: return 1e300;
      default: return old * 2 + 1;  // doubles overflow to infinity, which is defined
    }
  }

  std::string NewString(std::string old) {
    switch (Below(4)) {
      case 0: return "";
      case 1: return old.substr(0, old.empty() ? 0 : Below(old.size()));
      case 2: return old + static_cast<char>(Below(256));
      default:
        if (!old.empty()) old[Below(old.size())] = static_cast<char>(Below(256));
        return old;
    }
  }

  // A value for an enum field: usually a declared one, sometimes one just outside the declared range
  // (proto3 enums are open: any int32 parses).
  int NewEnum(const Field* field) {
    const google::protobuf::EnumDescriptor* e = field->enum_type();
    if (Below(4) == 0)
      return Below(2) == 0 ? -1 : e->value(e->value_count() - 1)->number() + 1 + static_cast<int>(Below(3));
    return e->value(static_cast<int>(Below(static_cast<uint64_t>(e->value_count()))))->number();
  }

  void MutateScalar(Message& m, const Field* field, int index) {
    const google::protobuf::Reflection* r = m.GetReflection();
    const bool rep = index >= 0;
    switch (field->cpp_type()) {
      case Field::CPPTYPE_INT64: {
        const int64_t v = NewInt(rep ? r->GetRepeatedInt64(m, field, index) : r->GetInt64(m, field));
        rep ? r->SetRepeatedInt64(&m, field, index, v) : r->SetInt64(&m, field, v);
        break;
      }
      case Field::CPPTYPE_INT32: {
        const int32_t v =
            static_cast<int32_t>(NewInt(rep ? r->GetRepeatedInt32(m, field, index) : r->GetInt32(m, field)));
        rep ? r->SetRepeatedInt32(&m, field, index, v) : r->SetInt32(&m, field, v);
        break;
      }
      case Field::CPPTYPE_UINT64: {
        const uint64_t v = static_cast<uint64_t>(
            NewInt(static_cast<int64_t>(rep ? r->GetRepeatedUInt64(m, field, index) : r->GetUInt64(m, field))));
        rep ? r->SetRepeatedUInt64(&m, field, index, v) : r->SetUInt64(&m, field, v);
        break;
      }
      case Field::CPPTYPE_UINT32: {
        const uint32_t v =
            static_cast<uint32_t>(NewInt(rep ? r->GetRepeatedUInt32(m, field, index) : r->GetUInt32(m, field)));
        rep ? r->SetRepeatedUInt32(&m, field, index, v) : r->SetUInt32(&m, field, v);
        break;
      }
      case Field::CPPTYPE_DOUBLE: {
        const double v = NewDouble(rep ? r->GetRepeatedDouble(m, field, index) : r->GetDouble(m, field));
        rep ? r->SetRepeatedDouble(&m, field, index, v) : r->SetDouble(&m, field, v);
        break;
      }
      case Field::CPPTYPE_FLOAT: {
        const float v =
            static_cast<float>(NewDouble(rep ? r->GetRepeatedFloat(m, field, index) : r->GetFloat(m, field)));
        rep ? r->SetRepeatedFloat(&m, field, index, v) : r->SetFloat(&m, field, v);
        break;
      }
      case Field::CPPTYPE_BOOL: {
        const bool v = !(rep ? r->GetRepeatedBool(m, field, index) : r->GetBool(m, field));
        rep ? r->SetRepeatedBool(&m, field, index, v) : r->SetBool(&m, field, v);
        break;
      }
      case Field::CPPTYPE_ENUM: {
        const int v = NewEnum(field);
        rep ? r->SetRepeatedEnumValue(&m, field, index, v) : r->SetEnumValue(&m, field, v);
        break;
      }
      case Field::CPPTYPE_STRING: {
        std::string v = NewString(rep ? r->GetRepeatedString(m, field, index) : r->GetString(m, field));
        rep ? r->SetRepeatedString(&m, field, index, std::move(v)) : r->SetString(&m, field, std::move(v));
        break;
      }
      case Field::CPPTYPE_MESSAGE: break;
    }
  }

  // Adds an element to a repeated field: a copy of an existing one, or a default one.
  void AddElement(Message& m, const Field* field) {
    const google::protobuf::Reflection* r = m.GetReflection();
    const int size = r->FieldSize(m, field);
    const int from = size > 0 && Below(4) != 0 ? static_cast<int>(Below(static_cast<uint64_t>(size))) : -1;
    switch (field->cpp_type()) {
      case Field::CPPTYPE_INT64:
        r->AddInt64(&m, field, from >= 0 ? r->GetRepeatedInt64(m, field, from) : NewInt(0));
        break;
      case Field::CPPTYPE_INT32: r->AddInt32(&m, field, from >= 0 ? r->GetRepeatedInt32(m, field, from) : 0); break;
      case Field::CPPTYPE_UINT64: r->AddUInt64(&m, field, from >= 0 ? r->GetRepeatedUInt64(m, field, from) : 0); break;
      case Field::CPPTYPE_UINT32: r->AddUInt32(&m, field, from >= 0 ? r->GetRepeatedUInt32(m, field, from) : 0); break;
      case Field::CPPTYPE_DOUBLE: r->AddDouble(&m, field, from >= 0 ? r->GetRepeatedDouble(m, field, from) : 0); break;
      case Field::CPPTYPE_FLOAT: r->AddFloat(&m, field, from >= 0 ? r->GetRepeatedFloat(m, field, from) : 0); break;
      case Field::CPPTYPE_BOOL: r->AddBool(&m, field, from >= 0 && r->GetRepeatedBool(m, field, from)); break;
      case Field::CPPTYPE_ENUM:
        r->AddEnumValue(&m, field, from >= 0 ? r->GetRepeatedEnumValue(m, field, from) : NewEnum(field));
        break;
      case Field::CPPTYPE_STRING: r->AddString(&m, field, from >= 0 ? r->GetRepeatedString(m, field, from) : ""); break;
      case Field::CPPTYPE_MESSAGE: {
        Message* added = r->AddMessage(&m, field);
        if (from >= 0) added->CopyFrom(r->GetRepeatedMessage(m, field, from));
        break;
      }
    }
  }

  void MutateRepeated(Message& m, const Field* field) {
    const google::protobuf::Reflection* r = m.GetReflection();
    const int size = r->FieldSize(m, field);
    const uint64_t action = Below(4);
    if (action == 0 || size == 0) {
      AddElement(m, field);
    } else if (action == 1) {
      // Remove one element: swap it to the end, drop the last.
      r->SwapElements(&m, field, static_cast<int>(Below(static_cast<uint64_t>(size))), size - 1);
      r->RemoveLast(&m, field);
    } else if (action == 2) {
      r->SwapElements(&m, field, static_cast<int>(Below(static_cast<uint64_t>(size))),
                      static_cast<int>(Below(static_cast<uint64_t>(size))));
    } else if (field->cpp_type() == Field::CPPTYPE_MESSAGE) {
      r->MutableRepeatedMessage(&m, field, static_cast<int>(Below(static_cast<uint64_t>(size))))->Clear();
    } else {
      MutateScalar(m, field, static_cast<int>(Below(static_cast<uint64_t>(size))));
    }
  }

  void MutateOnce(Message& message) {
    ints_.clear();
    CollectInts(message, ints_, 0);
    std::vector<Site> sites;
    CollectSites(message, sites, 0);
    if (sites.empty()) return;
    const Site site = sites[Below(sites.size())];
    const google::protobuf::Reflection* r = site.message->GetReflection();
    if (site.field->is_repeated() && site.index < 0) {
      MutateRepeated(*site.message, site.field);
    } else if (site.field->cpp_type() == Field::CPPTYPE_MESSAGE) {
      if (r->HasField(*site.message, site.field)) {
        r->ClearField(site.message, site.field);
      } else {
        r->MutableMessage(site.message, site.field);
      }
    } else {
      MutateScalar(*site.message, site.field, site.index);
    }
  }

  std::minstd_rand rng_;
  std::vector<int64_t> ints_;
};

}  // namespace lazyrt::fuzz
