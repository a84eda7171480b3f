// windows.h of the race lab (docs/race-lab.md, "Fix 3"): the few Win32
// memory calls the exported mlx/backend/rocm/pinned.cu makes on Windows HIP,
// declared so that its alias guard compiles on Linux against the host model
// (win_stub.cpp). Ours; nothing of the Windows SDK.
#pragma once

#include <cstddef>
#include <cstdint>

typedef unsigned long DWORD;
typedef int BOOL;
typedef uintptr_t ULONG_PTR;
typedef size_t SIZE_T;
typedef void* LPVOID;

#define MEM_COMMIT 0x1000
#define MEM_RESERVE 0x2000
#define MEM_RELEASE 0x8000
#define MEM_FREE 0x10000
#define PAGE_NOACCESS 0x01
#define PAGE_READWRITE 0x04

struct SYSTEM_INFO {
  DWORD dwPageSize;
  DWORD dwAllocationGranularity;
};

struct MEMORY_BASIC_INFORMATION {
  void* BaseAddress;
  void* AllocationBase;
  SIZE_T RegionSize;
  DWORD State;
};

void GetSystemInfo(SYSTEM_INFO* info);
// MEM_RESERVE (PAGE_NOACCESS) at `addr` fails when any of the range is in use;
// MEM_RESERVE | MEM_COMMIT anywhere (addr null) is an anonymous mapping.
void* VirtualAlloc(void* addr, SIZE_T bytes, DWORD type, DWORD protect);
BOOL VirtualFree(void* addr, SIZE_T bytes, DWORD type);
// From /proc/self/maps: MEM_COMMIT for a mapping, MEM_RESERVE for one of our
// PROT_NONE reservations, MEM_FREE between mappings.
SIZE_T VirtualQuery(const void* addr, MEMORY_BASIC_INFORMATION* info, SIZE_T size);
DWORD GetLastError();
void GetCurrentThreadStackLimits(ULONG_PTR* low, ULONG_PTR* high);
